// Workers leaving running jobs at a step boundary, losing nothing: drain,
// cordon and (for the scheduler) shrinking a job. Pure functions of
// (state, now) like the rest of cluster_state; callers persist the ChangeSet.
//
// A release is asked of a RUNNING job for one of its members. The worker's
// daemon hears it in its heartbeat response (HeartbeatResponse.release_jobs)
// and tells the trainer; the ranks agree at their next commit point that a
// rank leaves, all commit that step, and the leaver exits with
// TRAINER_EXIT_RELEASED. ApplyTrainerExit (generations.h) then starts the
// job's next generation without it (reason "released", no restart budget
// charged): the survivors heal from their own commit of that step. Below
// min_workers the job waits for workers as after any loss. When every rank
// leaves at once (suspension, or all its workers drained), rank 0 first
// checkpoints that step and has it recorded, and the trainers exit
// TRAINER_EXIT_RELEASED_ALL: the job resumes from that checkpoint.
//
// Growing takes the same boundary: the job is asked to re-form
// (HeartbeatResponse.reform_jobs), the ranks agree in the same vote, commit,
// and join the next generation with at_boundary (ReformAtBoundary,
// generations.h), so nothing is re-computed.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/cluster_state.h"

namespace herd::coordinator {

// Why a worker is asked to leave (the metrics label and the record's value).
inline constexpr char kReleaseDrain[] = "drain";
inline constexpr char kReleaseShrink[] = "shrink";
// The whole job leaves and goes back to PENDING (scheduling_policy.h): every
// member is asked, and the first rank to hear it takes all of them along.
inline constexpr char kReleaseSuspend[] = "suspend";

// Asks `job_id` to release `worker_id` at its next step boundary. A no-op
// (empty ChangeSet) for unknown or non-RUNNING jobs, non-members, members
// whose trainer already finished, and a release already asked.
ChangeSet RequestRelease(ClusterState& state, const std::string& job_id, const std::string& worker_id,
                         const std::string& reason, double now);

// The RUNNING jobs that asked `worker_id` to leave and still hold it: what
// its heartbeat response names in release_jobs.
std::vector<std::string> ReleaseJobsFor(const ClusterState& state, const std::string& worker_id);

// Those of ReleaseJobsFor that are being suspended whole (kReleaseSuspend):
// what its heartbeat response names in suspend_jobs.
std::vector<std::string> SuspendJobsFor(const ClusterState& state, const std::string& worker_id);

// The RUNNING jobs that asked `worker_id`'s trainer to re-form at its next
// step boundary, with the generation asked: what its heartbeat response
// names in reform_jobs (AdvanceGenerations asks when idle workers can join).
std::vector<v1::ReformRequest> ReformJobsFor(const ClusterState& state, const std::string& worker_id);

// The RUNNING jobs `worker_id` is an unfinished member of.
std::vector<std::string> JobsOf(const ClusterState& state, const std::string& worker_id);

// herd cordon / uncordon: whether new jobs may be placed on the worker.
// NOT_FOUND for an unknown worker.
absl::StatusOr<ChangeSet> SetCordoned(ClusterState& state, const std::string& worker_id, bool cordoned);

// herd drain: cordons the worker and asks every job it runs to release it
// (reason drain). `released` receives those jobs. NOT_FOUND for an unknown
// worker.
absl::StatusOr<ChangeSet> DrainWorker(ClusterState& state, const std::string& worker_id, double now,
                                      std::vector<std::string>* released);

// A heartbeat said the worker's daemon is shutting down: it takes no new job
// and every job it runs is asked to release it (reason drain). Idempotent.
ChangeSet MarkDraining(ClusterState& state, const std::string& worker_id, double now);

}  // namespace herd::coordinator
