// Small edits of ClusterState shared by every decision. Each keeps the
// model's invariants (job versions, worker state, the ChangeSet to persist).
#pragma once

#include <string>

#include "coordinator/cluster_state.h"

namespace herd::coordinator {

// Records that a job changed: WatchJob sees the new version, the caller
// persists it.
void Touch(JobRecord& job, double now, ChangeSet* changes);

// Its record is marked for saving only when it dies or comes back: being
// busy with a job is stored once, with the job (AssignMembersOfRunningJobs).
void SetWorker(WorkerRecord& worker, v1::WorkerState worker_state, const std::string& job_id, ChangeSet* changes);

// Frees `worker_id` if it is alive and still assigned to `job_id`.
void ReleaseWorker(ClusterState& state, const std::string& worker_id, const std::string& job_id, ChangeSet* changes);

// Frees the live members still assigned to `job`.
void ReleaseMembers(ClusterState& state, const JobRecord& job, ChangeSet* changes);

// Moves a job to a final state and frees its members.
void FinishJob(ClusterState& state, JobRecord& job, v1::JobState final_state, const std::string& reason, double now,
               ChangeSet* changes);

}  // namespace herd::coordinator
