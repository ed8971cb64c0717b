// WatchJob's stream: the job now, then each change, until a final state (OK)
// or the watcher leaves; waiting for a change, it holds no thread.
#pragma once

#include <atomic>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator.h"
#include "coordinator/event_stream.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

class JobWatchStream final : public EventStream<v1::WatchJobEvent>, public JobWatcher {
 public:
  static std::shared_ptr<JobWatchStream> Open(Coordinator* coordinator, Metrics::OpenStreamCount open) {
    return EventStream::Open<JobWatchStream>(coordinator, std::move(open));
  }

  JobWatchStream(Coordinator* coordinator, Metrics::OpenStreamCount open)
      : EventStream("the watcher cancelled", "the watcher went away", std::move(open)), coordinator_(coordinator) {}

  // The coordinator's registration, dropped when the call is over.
  void Watching(JobWatchers::WatchId id) { watch_ = id; }
  void Changed(const JobSnapshot& job) override;
  void End(const absl::Status& status) override { EventStream::End(status); }

 private:
  void Detached() override { coordinator_->StopWatching(watch_); }

  Coordinator* const coordinator_;
  std::atomic<JobWatchers::WatchId> watch_{0};
  // Keeps the events in version order when deliveries race.
  absl::Mutex mu_;
  int64_t sent_version_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace herd::coordinator
