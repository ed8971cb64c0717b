#include "coordinator/state_edits.h"

namespace herd::coordinator {

void Touch(JobRecord& job, double now, ChangeSet* changes) {
  ++job.version;
  job.info.set_updated_unix(now);
  changes->jobs.insert(job.info.id());
}

void SetWorker(WorkerRecord& worker, v1::WorkerState worker_state, const std::string& job_id, ChangeSet* changes) {
  // Of its state only whether it is dead is stored: which job it is busy
  // with is that job's record (its generation's members).
  if ((worker.state == v1::DEAD) != (worker_state == v1::DEAD)) changes->workers.insert(worker.id);
  worker.state = worker_state;
  worker.job_id = job_id;
}

void ReleaseWorker(ClusterState& state, const std::string& worker_id, const std::string& job_id, ChangeSet* changes) {
  auto it = state.workers.find(worker_id);
  if (it == state.workers.end()) return;
  WorkerRecord& worker = it->second;
  if (worker.state == v1::DEAD || worker.job_id != job_id) return;
  SetWorker(worker, v1::IDLE, "", changes);
}

void ReleaseMembers(ClusterState& state, const JobRecord& job, ChangeSet* changes) {
  for (const std::string& member : job.generation.members) ReleaseWorker(state, member, job.info.id(), changes);
}

void FinishJob(ClusterState& state, JobRecord& job, v1::JobState final_state, const std::string& reason, double now,
               ChangeSet* changes) {
  job.info.set_state(final_state);
  job.info.set_reason(reason);
  job.recovering = false;
  job.release_requested.clear();
  ReleaseMembers(state, job, changes);
  Touch(job, now, changes);
}

}  // namespace herd::coordinator
