#include "coordinator/job_settings.h"

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "coordinator/release.h"
#include "coordinator/state_edits.h"

namespace herd::coordinator {
namespace {

// The job `job_id` when it may still change.
absl::StatusOr<JobRecord*> ChangeableJob(ClusterState& state, const std::string& job_id) {
  auto it = state.jobs.find(job_id);
  if (it == state.jobs.end()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  if (IsFinal(it->second.info.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is already ", v1::JobState_Name(it->second.info.state())));
  }
  return &it->second;
}

}  // namespace

absl::StatusOr<ChangeSet> ResizeJob(ClusterState& state, const std::string& job_id, int64_t min_workers,
                                    int64_t max_workers, double now) {
  absl::StatusOr<JobRecord*> found = ChangeableJob(state, job_id);
  if (!found.ok()) return found.status();
  JobRecord& job = **found;
  if (min_workers < 0) return absl::InvalidArgumentError(absl::StrCat("min_workers: must be >= 1, got ", min_workers));
  if (max_workers < 0) return absl::InvalidArgumentError(absl::StrCat("max_workers: must be >= 1, got ", max_workers));
  v1::JobSpec spec = job.info.spec();
  if (min_workers > 0) spec.set_min_workers(min_workers);
  if (max_workers > 0) spec.set_max_workers(max_workers);
  if (absl::Status status = ValidateJobSpec(spec); !status.ok()) return status;
  *job.info.mutable_spec() = spec;
  ChangeSet changes;
  Touch(job, now, &changes);
  const Generation& generation = job.generation;
  if (job.info.state() != v1::RUNNING || !generation.formed) return changes;
  // Highest ranks leave first: rank 0 holds the commit.
  int64_t staying = 0;
  for (const std::string& member : generation.members) staying += job.release_requested.count(member) ? 0 : 1;
  for (auto member = generation.members.rbegin(); member != generation.members.rend() && staying > spec.max_workers();
       ++member) {
    if (job.release_requested.count(*member)) continue;
    changes.Merge(RequestRelease(state, job_id, *member, ReleaseReason::kResized, now));
    --staying;
  }
  return changes;
}

absl::StatusOr<ChangeSet> SetJobPriority(ClusterState& state, const std::string& job_id, int64_t priority,
                                         double now) {
  absl::StatusOr<JobRecord*> found = ChangeableJob(state, job_id);
  if (!found.ok()) return found.status();
  JobRecord& job = **found;
  v1::JobSpec spec = job.info.spec();
  spec.set_priority(priority);
  if (absl::Status status = ValidateJobSpec(spec); !status.ok()) return status;
  *job.info.mutable_spec() = spec;
  ChangeSet changes;
  Touch(job, now, &changes);
  return changes;
}

}  // namespace herd::coordinator
