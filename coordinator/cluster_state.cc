#include "coordinator/cluster_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/spec_enums.h"
#include "coordinator/placement.h"
#include "coordinator/state_edits.h"

namespace herd::coordinator {
namespace {

// The RUNNING job whose current generation has `worker_id` as a member.
const JobRecord* RunningJobOf(const ClusterState& state, const WorkerRecord& worker) {
  auto it = state.jobs.find(worker.job_id);
  if (it == state.jobs.end()) return nullptr;
  const JobRecord& job = it->second;
  if (job.info.state() != v1::RUNNING || job.generation.RankOf(worker.id) < 0) return nullptr;
  return &job;
}

}  // namespace

int64_t Generation::RankOf(const std::string& worker_id) const {
  auto it = std::find(members.begin(), members.end(), worker_id);
  return it == members.end() ? -1 : static_cast<int64_t>(it - members.begin());
}

v1::WorkerInfo WorkerRecord::ToInfo() const {
  v1::WorkerInfo info;
  info.set_id(id);
  info.set_address(address);
  info.set_device_kind(device_kind);
  info.set_device_count(device_count);
  info.set_state(state);
  info.set_job_id(job_id);
  info.set_last_heartbeat_unix(last_heartbeat);
  info.set_cordoned(cordoned);
  info.set_draining(draining);
  info.mutable_labels()->insert(labels.begin(), labels.end());
  return info;
}

void ChangeSet::Merge(const ChangeSet& other) {
  jobs.insert(other.jobs.begin(), other.jobs.end());
  workers.insert(other.workers.begin(), other.workers.end());
  generations_started.insert(generations_started.end(), other.generations_started.begin(),
                             other.generations_started.end());
  preemptions.insert(preemptions.end(), other.preemptions.begin(), other.preemptions.end());
  releases_requested.insert(releases_requested.end(), other.releases_requested.begin(),
                            other.releases_requested.end());
}

bool IsFinal(v1::JobState state) { return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED; }

JobRecord& AddPendingJob(ClusterState& state, const std::string& id, const v1::JobSpec& spec, double now,
                         ChangeSet* changes) {
  JobRecord& job = state.jobs[id];
  job.info.set_id(id);
  job.info.set_name(spec.name());
  job.info.set_state(v1::PENDING);
  job.info.set_reason(WaitingForWorkersText());
  job.pending_reason = PendingReason::kWaitingForWorkers;
  job.info.set_created_unix(now);
  *job.info.mutable_spec() = spec;
  job.submit_seq = state.next_submit_seq++;
  Touch(job, now, changes);
  return job;
}

absl::StatusOr<ChangeSet> CancelJob(ClusterState& state, const std::string& job_id, double now) {
  auto it = state.jobs.find(job_id);
  if (it == state.jobs.end()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  JobRecord& job = it->second;
  if (IsFinal(job.info.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is already ", v1::JobState_Name(job.info.state())));
  }
  ChangeSet changes;
  FinishJob(state, job, v1::CANCELLED, "cancelled by user", now, &changes);
  return changes;
}

ChangeSet UpsertWorker(ClusterState& state, const v1::RegisterWorkerRequest& request, double now) {
  ChangeSet changes;
  WorkerRecord& worker = state.workers[request.worker_id()];
  worker.id = request.worker_id();
  worker.address = request.address();
  worker.device_kind = request.device_kind();
  worker.device_count = request.device_count();
  worker.labels = std::map<std::string, std::string>(request.labels().begin(), request.labels().end());
  worker.last_heartbeat = now;
  changes.workers.insert(worker.id);
  if (const JobRecord* job = RunningJobOf(state, worker)) {
    SetWorker(worker, v1::BUSY, job->info.id(), &changes);
  } else {
    SetWorker(worker, v1::IDLE, "", &changes);
  }
  return changes;
}

void AssignMembersOfRunningJobs(ClusterState& state) {
  for (auto& [id, worker] : state.workers) {
    if (worker.state == v1::DEAD) continue;
    worker.state = v1::IDLE;
    worker.job_id.clear();
  }
  for (const auto& [job_id, job] : state.jobs) {
    if (job.info.state() != v1::RUNNING) continue;
    for (const std::string& member : job.generation.members) {
      auto worker = state.workers.find(member);
      if (worker == state.workers.end() || worker->second.state == v1::DEAD) continue;
      worker->second.state = v1::BUSY;
      worker->second.job_id = job_id;
    }
  }
}

bool IsRestartedWorker(const ClusterState& state, const std::string& worker_id, const std::string& incarnation) {
  auto it = state.workers.find(worker_id);
  return it != state.workers.end() && !it->second.incarnation.empty() && !incarnation.empty() &&
         it->second.incarnation != incarnation;
}

std::vector<v1::Assignment> AssignmentsFor(const ClusterState& state, const std::string& worker_id) {
  std::vector<v1::Assignment> assignments;
  auto worker = state.workers.find(worker_id);
  if (worker == state.workers.end()) return assignments;
  const JobRecord* job = RunningJobOf(state, worker->second);
  if (job == nullptr) {
    // A worker held for re-admission keeps its trainer (rank -1: none yet).
    const std::string held = HeldForJob(state, worker->second);
    if (held.empty()) return assignments;
    v1::Assignment& assignment = assignments.emplace_back();
    assignment.set_job_id(held);
    assignment.set_generation(state.jobs.at(held).generation.number);
    assignment.set_rank(-1);
    return assignments;
  }
  if (job->generation.finished.count(worker_id)) return assignments;
  // Survivors of a generation still forming stay assigned, so their daemon
  // keeps the trainer (and the state it holds in memory) alive.
  v1::Assignment& assignment = assignments.emplace_back();
  assignment.set_job_id(job->info.id());
  assignment.set_generation(job->generation.number);
  assignment.set_rank(job->generation.RankOf(worker_id));
  return assignments;
}

std::string HeldForJob(const ClusterState& state, const WorkerRecord& worker) {
  if (worker.state != v1::IDLE) return "";
  for (const std::string& job_id : worker.running_jobs) {
    auto it = state.jobs.find(job_id);
    if (it == state.jobs.end()) continue;
    const JobRecord& job = it->second;
    if (job.info.state() != v1::RUNNING || SpecName(job.info.spec().device()) != worker.device_kind) continue;
    if (!FitsPlacement(worker.labels, job.info.spec())) continue;
    if (job.generation.RankOf(worker.id) >= 0) continue;
    if (static_cast<int64_t>(job.generation.members.size()) >= job.info.spec().max_workers()) continue;
    return job_id;
  }
  return "";
}

bool AwaitsTrainerAnswer(const ClusterState& state, const WorkerRecord& worker) {
  for (const std::string& job_id : worker.running_jobs) {
    auto it = state.jobs.find(job_id);
    if (it != state.jobs.end() && it->second.info.state() == v1::RUNNING && it->second.unresponsive.count(worker.id)) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> IdleWorkersFor(const ClusterState& state, const std::string& job_id, const v1::JobSpec& spec,
                                        const std::string& excluded, bool honor_reservations) {
  std::vector<std::string> first, free;
  for (const auto& [id, worker] : state.workers) {
    if (worker.state != v1::IDLE || !worker.Schedulable() || worker.device_kind != SpecName(spec.device()) ||
        id == excluded || !FitsPlacement(worker.labels, spec) || AwaitsTrainerAnswer(state, worker)) {
      continue;
    }
    const std::string held_for = HeldForJob(state, worker);
    std::string reserved_for;
    if (honor_reservations) {
      auto reservation = state.reserved.find(id);
      if (reservation != state.reserved.end()) reserved_for = reservation->second;
    }
    const std::string& kept_for = held_for.empty() ? reserved_for : held_for;
    if (kept_for == job_id) {
      first.push_back(id);
    } else if (kept_for.empty()) {
      free.push_back(id);
    }
  }
  first.insert(first.end(), free.begin(), free.end());
  return first;
}

bool GraceAfterPause(ClusterState& state, double last_upkeep, double now, double lease_seconds) {
  // Upkeep runs several times a second; a gap of a quarter lease already
  // risks expiring a worker whose last heartbeat came just before it.
  if (last_upkeep <= 0 || now - last_upkeep <= lease_seconds / 4) return false;
  for (auto& [id, worker] : state.workers) {
    if (worker.state != v1::DEAD) worker.last_heartbeat = std::max(worker.last_heartbeat, now);
  }
  return true;
}

void ApplyLeaseRenewals(ClusterState& state, const std::vector<LeaseRenewal>& renewals) {
  for (const LeaseRenewal& renewal : renewals) {
    auto it = state.workers.find(renewal.worker_id);
    if (it == state.workers.end() || it->second.state == v1::DEAD) continue;
    it->second.last_heartbeat = renewal.heard_at;
  }
}

absl::Status CheckCurrentGeneration(const ClusterState& state, const std::string& job_id, int64_t generation) {
  auto it = state.jobs.find(job_id);
  if (it == state.jobs.end()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  const Generation& current = it->second.generation;
  if (generation != current.number) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, ": generation ", generation, " is not current (current: ", current.number, ")"));
  }
  if (!current.formed) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, ": generation ", generation, " has not formed yet (waiting for workers)"));
  }
  return absl::OkStatus();
}

void RecordProgress(JobRecord& job, const v1::ReportProgressRequest& report) {
  v1::JobInfo& info = job.info;
  info.set_step(report.step());
  info.set_epoch(report.epoch());
  info.set_samples_in_epoch(report.samples_in_epoch());
  info.set_samples_per_second(report.samples_per_second());
  info.set_loss(report.loss());
  // Evaluations arrive only every eval interval: keep the last ones between.
  if (!report.eval().empty()) *info.mutable_eval() = report.eval();
  if (report.total_steps() > 0) info.set_total_steps(report.total_steps());
  info.set_warning(report.warning());
  // Only the final report names the final model; earlier ones leave it be.
  if (!report.final_model().empty()) *info.mutable_final_model() = report.final_model();
  info.set_learning_rate(report.learning_rate());
  if (report.rank() == 0) {
    if (report.has_sync_state()) {
      *info.mutable_sync_state() = report.sync_state();
    } else {
      info.clear_sync_state();
    }
  }
  // The newest interval's slowest rank and ranks replace the last (none
  // with one rank). Not saved in the state database: it is refreshed every log
  // interval. The trainer knows ranks; the members name their workers.
  const std::vector<std::string>& members = job.generation.members;
  if (report.has_straggler() && report.straggler().rank() >= 0 &&
      report.straggler().rank() < static_cast<int64_t>(members.size())) {
    *info.mutable_straggler() = report.straggler();
    info.mutable_straggler()->set_worker_id(members[report.straggler().rank()]);
  } else {
    info.clear_straggler();
  }
  info.clear_ranks();
  if (report.ranks_size() == static_cast<int>(members.size())) {
    *info.mutable_ranks() = report.ranks();
    for (int rank = 0; rank < info.ranks_size(); ++rank) info.mutable_ranks(rank)->set_worker_id(members[rank]);
  }
}

bool ApplyProgress(ClusterState& state, const v1::ReportProgressRequest& report, double now, ChangeSet* changes) {
  JobRecord& job = state.jobs.at(report.job_id());
  if (job.info.state() != v1::RUNNING) return true;
  if (report.rank() != 0) return false;
  RecordProgress(job, report);
  job.info.set_world_size(static_cast<int64_t>(job.generation.members.size()));
  job.generation.committed = true;
  job.without_commit.clear();  // every rank reached this commit
  if (report.step() > job.generation.start_step) {
    // A generation with them trained a step: members that came back after a
    // back-off start from one lease again if they are ever left out again.
    for (const std::string& member : job.generation.members) job.readmit.erase(member);
  }
  Touch(job, now, changes);
  return false;
}

const v1::CheckpointInfo* NewestCheckpoint(const ClusterState& state, const std::string& job_id) {
  auto it = state.checkpoints.find(job_id);
  if (it == state.checkpoints.end() || it->second.empty()) return nullptr;
  return &it->second.back();
}

std::vector<v1::CheckpointInfo> RecordCheckpoint(ClusterState& state, const v1::CheckpointInfo& checkpoint,
                                                 int64_t keep) {
  std::vector<v1::CheckpointInfo>& catalog = state.checkpoints[checkpoint.job_id()];
  std::vector<v1::CheckpointInfo> dropped;
  for (auto it = catalog.begin(); it != catalog.end();) {
    if (it->path() != checkpoint.path()) {
      ++it;
      continue;
    }
    dropped.push_back(*it);
    it = catalog.erase(it);
  }
  catalog.push_back(checkpoint);
  const size_t limit = static_cast<size_t>(std::max<int64_t>(keep, 1));
  if (catalog.size() <= limit) return dropped;
  const auto excess = catalog.begin() + (catalog.size() - limit);
  dropped.insert(dropped.end(), catalog.begin(), excess);
  catalog.erase(catalog.begin(), excess);
  return dropped;
}

const v1::CheckpointInfo* ListedCheckpoint(const ClusterState& state, const v1::CommitCheckpointRequest& record) {
  auto it = state.checkpoints.find(record.job_id());
  if (it == state.checkpoints.end()) return nullptr;
  for (const v1::CheckpointInfo& listed : it->second) {
    if (listed.path() == record.path() && listed.sha256() == record.sha256()) return &listed;
  }
  return nullptr;
}

}  // namespace herd::coordinator
