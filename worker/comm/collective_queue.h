// Runs collectives in issue order on the communicator's own threads and
// enforces the failure rule every backend shares: once an op fails, the
// communicator is broken, and every later op fails fast with ABORTED quoting
// that first error (peers have diverged; only a new rendezvous can recover).
// Knows nothing about Gloo, so the rule is tested on its own.
//
// A caller that waits on the op at the head of the queue while no op is
// running runs it itself: blocking calls then cost no thread hand-off, which
// on a loaded machine can take longer than a small all-reduce.
//
// Lanes: a backend whose ops need a resource of their own while they run
// (the TCP mesh: a set of sockets, one per peer) gives the queue that many
// lanes. Op `sequence` runs on lane sequence % lanes, and each lane runs its
// ops one at a time, in issue order; ops on different lanes run at once.
// Every rank issues the same ops, so every rank puts each op on the same
// lane and the two ends of a lane's sockets always carry the same op.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"

namespace herd {

class CollectiveQueue {
 public:
  // Receives the op's issue sequence number (0, 1, ...), the same on every
  // rank, which backends use to tag messages.
  using Op = std::function<absl::Status(uint64_t sequence)>;
  // An op that also records what only it knows into its WorkTimes (the
  // first hop's end, the TCP window); the queue sets queued, started and
  // finished for every op.
  using TimedOp = std::function<absl::Status(uint64_t sequence, WorkTimes& times)>;

  // Up to `threads` ops may run at once; they still start in issue order.
  explicit CollectiveQueue(int threads = 1);
  // One thread per lane; an op waits only for the ops before it on its own
  // lane (see above). Lanes(1) is CollectiveQueue(1).
  static std::unique_ptr<CollectiveQueue> Lanes(int lanes);
  ~CollectiveQueue();  // Shutdown()
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  // Queues `op`. `what` names the op in errors. Safe from any thread.
  std::shared_ptr<Work> Submit(std::string what, Op op);
  std::shared_ptr<Work> Submit(std::string what, TimedOp op);

  // Fails the ops that have not started with ABORTED and waits for the
  // running ones (each bounded by its own timeout). Idempotent.
  void Shutdown();

  // OK until the first failure; then that failure.
  absl::Status first_error() const;

 private:
  class PendingWork;
  struct State;  // shared with the Work handles, which may outlive the queue

  CollectiveQueue(int threads, int lanes);

  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

}  // namespace herd
