// Placeholder until the drain branch's mechanism is merged: records the
// request only.
#include "coordinator/release.h"

#include "coordinator/state_edits.h"

namespace herd::coordinator {

ChangeSet RequestRelease(ClusterState& state, const std::string& job_id, const std::string& worker_id,
                         const std::string& reason, double now) {
  ChangeSet changes;
  auto it = state.jobs.find(job_id);
  if (it == state.jobs.end() || it->second.info.state() != v1::RUNNING) return changes;
  JobRecord& job = it->second;
  if (job.generation.RankOf(worker_id) < 0 || job.release_requested.count(worker_id)) return changes;
  job.release_requested[worker_id] = reason;
  Touch(job, now, &changes);
  return changes;
}

}  // namespace herd::coordinator
