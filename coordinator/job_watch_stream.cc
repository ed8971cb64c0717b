#include "coordinator/job_watch_stream.h"

#include "coordinator/cluster_state.h"

namespace herd::coordinator {

void JobWatchStream::Changed(const JobSnapshot& job) {
  absl::MutexLock lock(&mu_);
  if (job.version <= sent_version_) return;  // overtaken by a newer delivery
  sent_version_ = job.version;
  v1::WatchJobEvent event;
  *event.mutable_job() = job.info;
  const bool final = IsFinal(job.info.state());
  Send(std::move(event));
  if (final) End(absl::OkStatus());
}

}  // namespace herd::coordinator
