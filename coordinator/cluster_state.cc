#include "coordinator/cluster_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace herd::coordinator {
namespace {

// Records that a job changed: WatchJob sees the new version, the caller
// persists it.
void Touch(JobRecord& job, double now, ChangeSet* changes) {
  ++job.version;
  job.info.set_updated_unix(now);
  changes->jobs.insert(job.info.id());
}

void SetWorker(WorkerRecord& worker, v1::WorkerState worker_state, const std::string& job_id, ChangeSet* changes) {
  worker.state = worker_state;
  worker.job_id = job_id;
  changes->workers.insert(worker.id);
}

// Frees the live members still assigned to `job`.
void ReleaseMembers(ClusterState& state, const JobRecord& job, ChangeSet* changes) {
  for (const std::string& member : job.generation.members) {
    auto it = state.workers.find(member);
    if (it == state.workers.end()) continue;
    WorkerRecord& worker = it->second;
    if (worker.state == v1::DEAD || worker.job_id != job.info.id()) continue;
    SetWorker(worker, v1::IDLE, "", changes);
  }
}

void FinishJob(ClusterState& state, JobRecord& job, v1::JobState final_state, const std::string& reason, double now,
               ChangeSet* changes) {
  job.info.set_state(final_state);
  job.info.set_reason(reason);
  ReleaseMembers(state, job, changes);
  Touch(job, now, changes);
}

// The one place a generation begins: numbering, ranks, the JobInfo mirror and
// the members' BUSY state all change together.
void StartGeneration(ClusterState& state, JobRecord& job, const std::vector<std::string>& members,
                     const std::string& reason, double now, ChangeSet* changes) {
  job.generation.number = job.next_generation++;
  job.generation.members = members;
  job.generation.finished.clear();
  job.info.set_generation(job.generation.number);
  job.info.set_world_size(static_cast<int64_t>(members.size()));
  job.info.clear_workers();
  for (const std::string& member : members) {
    job.info.add_workers(member);
    SetWorker(state.workers.at(member), v1::BUSY, job.info.id(), changes);
  }
  job.info.set_state(v1::RUNNING);
  job.info.set_reason("");
  Touch(job, now, changes);
  changes->generations_started.push_back({job.info.id(), job.generation.number, reason});
}

// An unfinished member of the current generation is gone. For now the job
// fails; re-forming a generation from the survivors belongs here.
void HandleMemberLost(ClusterState& state, JobRecord& job, const std::string& worker_id, int64_t rank,
                      const std::string& cause, double now, ChangeSet* changes) {
  FinishJob(state, job, v1::FAILED, absl::StrCat("worker ", worker_id, " (rank ", rank, ") lost: ", cause), now,
            changes);
}

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
  return info;
}

void ChangeSet::Merge(const ChangeSet& other) {
  jobs.insert(other.jobs.begin(), other.jobs.end());
  workers.insert(other.workers.begin(), other.workers.end());
  generations_started.insert(generations_started.end(), other.generations_started.begin(),
                             other.generations_started.end());
}

bool IsFinal(v1::JobState state) { return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED; }

JobRecord& AddPendingJob(ClusterState& state, const std::string& id, const v1::JobSpec& spec, double now,
                         ChangeSet* changes) {
  JobRecord& job = state.jobs[id];
  job.info.set_id(id);
  job.info.set_name(spec.name());
  job.info.set_state(v1::PENDING);
  job.info.set_reason("waiting for workers");
  job.info.set_created_unix(now);
  *job.info.mutable_spec() = spec;
  job.submit_seq = state.next_submit_seq++;
  Touch(job, now, changes);
  return job;
}

ChangeSet Schedule(ClusterState& state, double now) {
  ChangeSet changes;
  std::vector<JobRecord*> pending;
  for (auto& [id, job] : state.jobs) {
    if (job.info.state() == v1::PENDING) pending.push_back(&job);
  }
  std::sort(pending.begin(), pending.end(),
            [](const JobRecord* a, const JobRecord* b) { return a->submit_seq < b->submit_seq; });
  for (JobRecord* job : pending) {
    const v1::JobSpec& spec = job->info.spec();
    std::vector<std::string> idle;
    for (const auto& [id, worker] : state.workers) {
      if (worker.state == v1::IDLE && worker.device_kind == spec.device()) idle.push_back(id);
    }
    if (static_cast<int64_t>(idle.size()) < spec.min_workers()) continue;
    if (static_cast<int64_t>(idle.size()) > spec.max_workers()) idle.resize(spec.max_workers());
    StartGeneration(state, *job, idle, "start", now, &changes);
  }
  return changes;
}

ChangeSet ExpireLeases(ClusterState& state, double now, double lease_seconds) {
  ChangeSet changes;
  for (auto& [id, worker] : state.workers) {
    if (worker.state == v1::DEAD || now - worker.last_heartbeat <= lease_seconds) continue;
    const std::string job_id = worker.job_id;
    SetWorker(worker, v1::DEAD, "", &changes);
    auto it = state.jobs.find(job_id);
    if (it == state.jobs.end() || it->second.info.state() != v1::RUNNING) continue;
    JobRecord& job = it->second;
    int64_t rank = job.generation.RankOf(id);
    // A member that already finished cleanly is not needed any more.
    if (rank < 0 || job.generation.finished.count(id)) continue;
    HandleMemberLost(state, job, id, rank, "lease expired", now, &changes);
  }
  return changes;
}

ChangeSet ApplyTrainerExit(ClusterState& state, const std::string& worker_id, const v1::TrainerExit& exit, double now) {
  ChangeSet changes;
  auto it = state.jobs.find(exit.job_id());
  if (it == state.jobs.end()) return changes;
  JobRecord& job = it->second;
  if (job.info.state() != v1::RUNNING || exit.generation() != job.generation.number) return changes;
  int64_t rank = job.generation.RankOf(worker_id);
  if (rank < 0) return changes;

  if (exit.exit_code() != 0) {
    std::string reason =
        absl::StrCat("worker ", worker_id, " (rank ", rank, ") trainer exited with code ", exit.exit_code());
    if (!exit.message().empty()) absl::StrAppend(&reason, ": ", exit.message());
    FinishJob(state, job, v1::FAILED, reason, now, &changes);
    return changes;
  }
  if (!job.generation.finished.insert(worker_id).second) return changes;  // a repeated report
  if (job.generation.finished.size() == job.generation.members.size()) {
    FinishJob(state, job, v1::SUCCEEDED, "", now, &changes);
  } else {
    Touch(job, now, &changes);
  }
  return changes;
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
  worker.last_heartbeat = now;
  if (const JobRecord* job = RunningJobOf(state, worker)) {
    SetWorker(worker, v1::BUSY, job->info.id(), &changes);
  } else {
    SetWorker(worker, v1::IDLE, "", &changes);
  }
  return changes;
}

std::vector<v1::Assignment> AssignmentsFor(const ClusterState& state, const std::string& worker_id) {
  std::vector<v1::Assignment> assignments;
  auto worker = state.workers.find(worker_id);
  if (worker == state.workers.end()) return assignments;
  const JobRecord* job = RunningJobOf(state, worker->second);
  if (job == nullptr || job->generation.finished.count(worker_id)) return assignments;
  v1::Assignment& assignment = assignments.emplace_back();
  assignment.set_job_id(job->info.id());
  assignment.set_generation(job->generation.number);
  assignment.set_rank(job->generation.RankOf(worker_id));
  return assignments;
}

absl::Status CheckCurrentGeneration(const ClusterState& state, const std::string& job_id, int64_t generation) {
  auto it = state.jobs.find(job_id);
  if (it == state.jobs.end()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  int64_t current = it->second.generation.number;
  if (generation != current) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, ": generation ", generation, " is not current (current: ", current, ")"));
  }
  return absl::OkStatus();
}

bool ApplyProgress(ClusterState& state, const v1::ReportProgressRequest& report, double now, ChangeSet* changes) {
  JobRecord& job = state.jobs.at(report.job_id());
  if (job.info.state() != v1::RUNNING) return true;
  if (report.rank() != 0) return false;
  v1::JobInfo& info = job.info;
  info.set_step(report.step());
  info.set_epoch(report.epoch());
  info.set_samples_in_epoch(report.samples_in_epoch());
  info.set_samples_per_second(report.samples_per_second());
  info.set_loss(report.loss());
  // Evaluations arrive only every eval interval: keep the last ones between.
  if (!report.eval().empty()) *info.mutable_eval() = report.eval();
  if (report.total_steps() > 0) info.set_total_steps(report.total_steps());
  info.set_world_size(static_cast<int64_t>(job.generation.members.size()));
  Touch(job, now, changes);
  return false;
}

std::vector<v1::CheckpointInfo> RecordCheckpoint(ClusterState& state, const v1::CheckpointInfo& checkpoint,
                                                 int64_t keep) {
  std::vector<v1::CheckpointInfo>& catalog = state.checkpoints[checkpoint.job_id()];
  catalog.push_back(checkpoint);
  const size_t limit = static_cast<size_t>(std::max<int64_t>(keep, 1));
  if (catalog.size() <= limit) return {};
  const auto excess = catalog.begin() + (catalog.size() - limit);
  std::vector<v1::CheckpointInfo> dropped(catalog.begin(), excess);
  catalog.erase(catalog.begin(), excess);
  return dropped;
}

}  // namespace herd::coordinator
