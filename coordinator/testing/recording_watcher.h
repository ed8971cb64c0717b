// Tests only: a JobWatcher that keeps what it is handed, registered through
// Coordinator::WatchJob as a WatchJob stream is, so a test waits for a
// job's change the way the product delivers it.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/job_watchers.h"

namespace herd::coordinator {

class RecordingWatcher final : public JobWatcher {
 public:
  void Changed(const JobSnapshot& job) override {
    absl::MutexLock lock(&mu_);
    seen_.push_back(job);
  }
  void End(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    ended_ = status;
  }

  // The first snapshot handed over that `wanted` accepts, waiting for it
  // up to `within`; nullopt if none came.
  std::optional<JobSnapshot> Await(const std::function<bool(const JobSnapshot&)>& wanted, absl::Duration within) {
    absl::MutexLock lock(&mu_);
    std::optional<JobSnapshot> found;
    auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const JobSnapshot& job : seen_) {
        if (wanted(job)) {
          found = job;
          return true;
        }
      }
      return false;
    };
    mu_.AwaitWithTimeout(absl::Condition(&arrived), within);
    return found;
  }

  std::vector<JobSnapshot> Seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }
  // The status End got; nullopt while not ended.
  std::optional<absl::Status> Ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }

 private:
  absl::Mutex mu_;
  std::vector<JobSnapshot> seen_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace herd::coordinator
