#include "coordinator/release.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/state_edits.h"

namespace herd::coordinator {
namespace {

bool UnfinishedMember(const JobRecord& job, const std::string& worker_id) {
  return job.generation.RankOf(worker_id) >= 0 && !job.generation.finished.count(worker_id);
}

// The unfinished members not asked to leave.
std::vector<std::string> Staying(const JobRecord& job) {
  std::vector<std::string> staying;
  for (const std::string& member : job.generation.members) {
    if (UnfinishedMember(job, member) && !job.release_requested.count(member)) staying.push_back(member);
  }
  return staying;
}

// Whether the job, after its releases, could not go on: fewer members stay
// than min_workers, and the idle workers it may take cannot make up for them.
bool BelowMinimumAfterReleases(const ClusterState& state, const JobRecord& job) {
  const int64_t staying = static_cast<int64_t>(Staying(job).size());
  if (staying == 0) return false;  // every member leaves already
  const v1::JobSpec& spec = job.info.spec();
  if (staying >= spec.min_workers()) return false;
  return staying + static_cast<int64_t>(IdleWorkersFor(state, job.info.id(), spec).size()) < spec.min_workers();
}

}  // namespace

ChangeSet RequestRelease(ClusterState& state, const std::string& job_id, const std::string& worker_id,
                         ReleaseReason reason, double now) {
  ChangeSet changes;
  auto it = state.jobs.find(job_id);
  if (it == state.jobs.end()) return changes;
  JobRecord& job = it->second;
  if (job.info.state() != v1::RUNNING || !UnfinishedMember(job, worker_id)) return changes;
  if (!job.release_requested.emplace(worker_id, reason).second) return changes;
  Touch(job, now, &changes);
  changes.releases_requested.push_back({job_id, worker_id, reason});
  if (BelowMinimumAfterReleases(state, job)) {
    for (const std::string& member : Staying(job)) {
      job.release_requested.emplace(member, reason);
      changes.releases_requested.push_back({job_id, member, reason});
    }
  }
  return changes;
}

std::vector<v1::JobLeavers> LeaversFor(const ClusterState& state, const std::string& worker_id) {
  std::vector<v1::JobLeavers> leavers;
  for (const auto& [id, job] : state.jobs) {
    // Ranks are stable only once a generation formed.
    if (job.info.state() != v1::RUNNING || !job.generation.formed || job.release_requested.empty() ||
        !UnfinishedMember(job, worker_id)) {
      continue;
    }
    v1::JobLeavers asked;
    for (const auto& [member, reason] : job.release_requested) {
      if (UnfinishedMember(job, member)) asked.add_ranks(job.generation.RankOf(member));
    }
    if (asked.ranks().empty()) continue;
    std::sort(asked.mutable_ranks()->begin(), asked.mutable_ranks()->end());
    asked.set_job_id(id);
    asked.set_generation(job.generation.number);
    leavers.push_back(std::move(asked));
  }
  return leavers;
}

std::vector<v1::ReformRequest> ReformJobsFor(const ClusterState& state, const std::string& worker_id) {
  std::vector<v1::ReformRequest> requests;
  for (const auto& [id, job] : state.jobs) {
    if (job.info.state() != v1::RUNNING || !job.generation.formed || !UnfinishedMember(job, worker_id) ||
        job.reform_requested_generation != job.generation.number) {
      continue;
    }
    v1::ReformRequest& request = requests.emplace_back();
    request.set_job_id(id);
    request.set_generation(job.generation.number);
  }
  return requests;
}

std::vector<std::string> JobsOf(const ClusterState& state, const std::string& worker_id) {
  std::vector<std::string> jobs;
  for (const auto& [id, job] : state.jobs) {
    if (job.info.state() == v1::RUNNING && UnfinishedMember(job, worker_id)) jobs.push_back(id);
  }
  return jobs;
}

absl::StatusOr<ChangeSet> SetCordoned(ClusterState& state, const std::string& worker_id, bool cordoned) {
  auto it = state.workers.find(worker_id);
  if (it == state.workers.end()) return absl::NotFoundError(absl::StrCat("worker ", worker_id, " not found"));
  ChangeSet changes;
  if (it->second.cordoned != cordoned) {
    it->second.cordoned = cordoned;
    changes.workers.insert(worker_id);
  }
  return changes;
}

absl::StatusOr<ChangeSet> DrainWorker(ClusterState& state, const std::string& worker_id, double now,
                                      std::vector<std::string>* released) {
  auto cordoned = SetCordoned(state, worker_id, true);
  if (!cordoned.ok()) return cordoned.status();
  ChangeSet changes = *cordoned;
  for (const std::string& job_id : JobsOf(state, worker_id)) {
    changes.Merge(RequestRelease(state, job_id, worker_id, ReleaseReason::kDrain, now));
    if (released != nullptr) released->push_back(job_id);
  }
  return changes;
}

ChangeSet MarkDraining(ClusterState& state, const std::string& worker_id, double now) {
  ChangeSet changes;
  auto it = state.workers.find(worker_id);
  if (it == state.workers.end()) return changes;
  it->second.draining = true;
  for (const std::string& job_id : JobsOf(state, worker_id)) {
    changes.Merge(RequestRelease(state, job_id, worker_id, ReleaseReason::kDrain, now));
  }
  return changes;
}

}  // namespace herd::coordinator
