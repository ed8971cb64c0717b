// Who watches which job (WatchJob streams), and handing them its changes.
// The coordinator records a watched job's new snapshot under its lock and
// delivers the records once the lock is released: a watcher's write may run
// gRPC's reactions at once, and those must never wait on the state lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

struct JobSnapshot {
  v1::JobInfo info;
  int64_t version = 0;
};

class JobWatcher {
 public:
  virtual ~JobWatcher() = default;
  // The job as it is now. Deliveries from different threads may overtake
  // each other: a snapshot no newer than one seen is stale.
  virtual void Changed(const JobSnapshot& job) = 0;
  // No more changes come (the coordinator stops).
  virtual void End(const absl::Status& status) = 0;
};

class JobWatchers {
 public:
  using WatchId = uint64_t;

  // 0 (and `watcher` ignored) after Shutdown.
  WatchId Add(const std::string& job_id, std::shared_ptr<JobWatcher> watcher);
  void Remove(WatchId id);
  // Whether a change of the job needs recording.
  bool Watched(const std::string& job_id);
  // Hands each job's snapshot to its watchers; call without the
  // coordinator's lock.
  void Deliver(const std::map<std::string, JobSnapshot>& changes);
  // True once exactly `count` watchers are registered; false after
  // `timeout` (tests).
  bool AwaitCount(size_t count, absl::Duration timeout);
  // Ends every watcher with `status`; Add refuses from now on.
  void Shutdown(const absl::Status& status);

 private:
  struct Watch {
    std::string job_id;
    std::shared_ptr<JobWatcher> watcher;
  };

  absl::Mutex mu_;
  WatchId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<WatchId, Watch> watches_ ABSL_GUARDED_BY(mu_);
  std::multimap<std::string, WatchId> by_job_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace herd::coordinator
