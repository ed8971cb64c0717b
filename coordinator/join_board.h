// What JoinGeneration answers, kept apart from the state lock so that the
// ranks of a rendezvous wait, and are answered, without it. The coordinator
// publishes a job's view whenever the job changes (after the change is
// written); a formed generation's answer (peers, spec, start step) is built
// once and shared, and each rank's copy only adds its rank. A waiting rank
// holds no thread: it is a registered waiter that Publish, the board's one
// deadline thread, Cancel or Shutdown answers.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/await_answer.h"
#include "coordinator/cluster_state.h"
#include "coordinator/deadline_timer.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

// The answer every member of one formed generation shares.
struct FormedAnswer {
  v1::JoinGenerationResponse response;  // rank and checkpoint_path unset
  std::string serialized;               // `response`, serialized once for every rank
  absl::flat_hash_map<std::string, int64_t> rank_of;
};

// One rank's answer: its generation's shared answer and the fields that are
// its own. A thousand ranks copying (and serializing) a thousand peers each
// took more CPU than the rest of a rendezvous: the RPC sends the shared
// bytes as they are, followed by OwnFields().
struct JoinAnswer {
  std::shared_ptr<const FormedAnswer> shared;
  int64_t rank = 0;
  std::string checkpoint_path;  // "" when none

  // This rank's fields, serialized: `shared->serialized` followed by them
  // parses as Message() (a protobuf parser merges concatenated messages,
  // and the shared part leaves these fields unset).
  std::string OwnFields() const;
  // The whole response, a copy: for in-process callers and tests.
  v1::JoinGenerationResponse Message() const;
};

// One job as its joiners see it.
struct JoinView {
  v1::JobState state = v1::PENDING;
  std::string reason;
  int64_t generation = 0;
  bool formed = false;
  std::string checkpoint_path;  // the newest checkpoint's, "" when none
  std::shared_ptr<const FormedAnswer> answer;  // while RUNNING with a formed generation
};

// The view of `job`. `previous` (may be null): the job's last view, whose
// answer is reused when the generation, its members, start step and spec
// are the same and `members_changed` is false (a member's address or labels
// may have changed).
JoinView JoinViewOf(const ClusterState& state, const JobRecord& job, const JoinView* previous,
                    bool members_changed);

class JoinBoard {
 public:
  using WaitId = uint64_t;
  // A wait's answer; called exactly once, never under the board's lock.
  using Done = absl::AnyInvocable<void(absl::StatusOr<JoinAnswer>)>;

  // What one JoinGeneration waits for.
  struct JoinWait {
    std::string job_id;
    std::string worker_id;
    int64_t after_generation = 0;
    absl::Duration wait;  // from now; <= 0: answer at once
    int64_t wait_ms = 0;  // as the caller asked, for DEADLINE_EXCEEDED's text
  };

  // `answer_threads`: threads, which hand settled answers to their
  // callers (so the publisher does not call a thousand of them); deadlines fire from one more (deadline_timer.h) on `clock`
  // (nullptr: a monotonic clock), which must outlive the board.
  explicit JoinBoard(int answer_threads = 2, const Clock* clock = nullptr);
  ~JoinBoard();  // Shutdown(), then the board's threads end
  JoinBoard(const JoinBoard&) = delete;
  JoinBoard& operator=(const JoinBoard&) = delete;

  // Answers the job's waiters that `view` settles (answer or error).
  void Publish(const std::string& job_id, JoinView view);
  // Every waiter, and every later wait that would have to wait, answers
  // UNAVAILABLE; returns once every answer given so far was delivered.
  void Shutdown();

  // JoinGeneration's wait, which holds no thread: `done` gets the answer
  // for `worker_id` once the job runs a formed generation newer than
  // `after_generation` that has it as a member. NOT_FOUND for an unknown
  // job, FAILED_PRECONDITION for a final one, DEADLINE_EXCEEDED when `wait`
  // ends (naming what it waited for), CANCELLED on Cancel. Errors known at
  // once are given before Wait returns. Returns the id for Cancel.
  WaitId Wait(JoinWait wait, Done done);
  // Answers the wait CANCELLED if it still waits (an RPC whose caller went).
  void Cancel(WaitId id);
  // Answers DEADLINE_EXCEEDED to the waits whose deadline `clock` has
  // reached. The board's deadline thread does this at each deadline; tests
  // that move a fake clock call it themselves.
  void FireDeadlines() { deadlines_.FireDue(); }

  // Wait, blocking the calling thread: for in-process callers and tests.
  // Cancels the wait once `cancelled` says so (asked every `cancel_poll`).
  absl::StatusOr<v1::JoinGenerationResponse> Await(JoinWait wait, absl::Duration cancel_poll,
                                                   const std::function<bool()>& cancelled);

  // Waits still waiting. AwaitWaiting: true once exactly `count` wait,
  // false after `timeout` (tests).
  size_t Waiting() ABSL_LOCKS_EXCLUDED(mu_);
  bool AwaitWaiting(size_t count, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    JoinWait wait;
    double deadline = 0;
    Done done;
  };
  // An answer to deliver.
  struct Ready {
    std::shared_ptr<const FormedAnswer> answer;
    std::string checkpoint_path;
    std::string worker_id;
    Done done;
  };
  // A settled wait whose error is delivered once mu_ is released.
  using Failed = std::pair<Done, absl::Status>;

  // Takes waiter `id` out of every index.
  Waiter Remove(WaitId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The deadlines of `ids` came: those still waiting answer DEADLINE_EXCEEDED.
  void Expire(const std::vector<WaitId>& ids) ABSL_LOCKS_EXCLUDED(mu_);
  void RunAnswers();

  absl::Mutex mu_;
  absl::CondVar ready_added_;  // an answer to deliver, or stopping
  std::map<std::string, JoinView> views_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // the threads end
  WaitId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<WaitId, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::flat_hash_set<WaitId>> waiting_on_ ABSL_GUARDED_BY(mu_);  // by job
  std::deque<Ready> ready_ ABSL_GUARDED_BY(mu_);
  int delivering_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> answer_threads_;
  DeadlineTimer deadlines_;  // last: its thread ends first
};

}  // namespace herd::coordinator
