// Sends a trainer's progress reports and checkpoint records to the
// coordinator from a thread of its own, so a slow, stalled or unreachable
// coordinator never holds up training (the data path does not need it).
//
// Progress reports: the latest wins (an unsent older one is dropped), and it
// is retried until acknowledged. Checkpoint records: each is retried until
// acknowledged or fenced; superseded checkpoints the answer names are
// deleted here too. What the coordinator answers comes back as flags the
// step loop reads: the newest generation it fenced, and cancellation.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/herd.pb.h"
#include "worker/train/generation/coordinator_link.h"

namespace herd {

class ProgressReporter {
 public:
  struct Options {
    std::chrono::milliseconds retry_delay{500};
  };
  // `on_recorded` (may be empty) runs on the reporter's thread for each
  // acknowledged checkpoint record. `client` must outlive the reporter.
  ProgressReporter(CoordinatorLink* client, std::function<void(const v1::CommitCheckpointResponse&)> on_recorded,
                   Options options);
  ProgressReporter(CoordinatorLink* client, std::function<void(const v1::CommitCheckpointResponse&)> on_recorded)
      : ProgressReporter(client, std::move(on_recorded), Options()) {}
  // Stops the thread; what is still unsent is dropped (see Flush, Stop).
  ~ProgressReporter();

  void PostProgress(v1::ReportProgressRequest report);
  void PostCheckpoint(v1::CommitCheckpointRequest record);

  // The newest generation the coordinator refused as superseded; -1 if none.
  int64_t fenced_generation() const;
  bool cancelled() const;
  // Waits up to `timeout` until everything posted was answered; true if so.
  bool Flush(std::chrono::milliseconds timeout);
  // The step of the newest checkpoint the coordinator acknowledged (recorded
  // in its catalog, not fenced); -1 if none.
  int64_t recorded_checkpoint_step() const;
  // Stops the thread (a call under way ends first) and returns the
  // checkpoint records the coordinator has not acknowledged, oldest first:
  // an exiting trainer hands them to its daemon. Nothing is sent after.
  std::vector<v1::CommitCheckpointRequest> Stop();

 private:
  void Run();
  // Outcome of one call: true when the item is done (acknowledged or fenced).
  bool Send(const v1::ReportProgressRequest& report);
  bool Send(const v1::CommitCheckpointRequest& record);
  void Fenced(int64_t generation);

  CoordinatorLink* client_;
  std::function<void(const v1::CommitCheckpointResponse&)> on_recorded_;
  Options options_;
  mutable absl::Mutex mu_;
  std::optional<v1::ReportProgressRequest> progress_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::CommitCheckpointRequest> checkpoints_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // an item taken off the queues is being sent
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t fenced_generation_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t recorded_checkpoint_step_ ABSL_GUARDED_BY(mu_) = -1;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace herd
