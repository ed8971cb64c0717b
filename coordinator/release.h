// Workers leaving running jobs at a step boundary, losing nothing: drain,
// cordon and (for the scheduler) shrinking a job. Pure functions of
// (state, now) like the rest of cluster_state; callers persist the ChangeSet.
//
// A release is asked of a RUNNING job for one of its members. Every member's
// daemon hears the job's whole set of leaving ranks in its heartbeat
// response (HeartbeatResponse.leavers) and tells its trainer; the ranks vote
// the union of what they heard at their next commit point, all commit that
// step, and every named leaver exits with TRAINER_EXIT_RELEASED, at that one
// boundary. ApplyTrainerExit (generations.h) then starts the job's next
// generation without them (reason "released", no restart budget charged):
// the survivors heal from their own commit of that step. A release that
// would leave the job below min_workers with no idle worker to make up takes
// every member (RequestRelease). When every rank leaves at once (suspension,
// or all its workers drained), rank 0 first checkpoints that step and has
// it recorded, and the trainers exit TRAINER_EXIT_RELEASED_ALL: the job goes
// back to PENDING and resumes from that checkpoint when workers are free.
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

// Why a worker is asked to leave: ReleaseReason (job_reasons.h). With
// kSuspend the whole job leaves and goes back to PENDING
// (scheduling_policy.h): every member is asked, and the first rank to hear
// it takes all of them along.

// Asks `job_id` to release `worker_id` at its next step boundary. A no-op
// (empty ChangeSet) for unknown or non-RUNNING jobs, non-members, members
// whose trainer already finished, and a release already asked. When the
// members that stay, with the idle workers that could join them, would be
// fewer than min_workers, every member is asked (for the same reason): the
// job would otherwise wait below its minimum and fail after
// --min-workers-wait-seconds, so it leaves whole, checkpointed, and waits
// PENDING until workers are free.
ChangeSet RequestRelease(ClusterState& state, const std::string& job_id, const std::string& worker_id,
                         ReleaseReason reason, double now);

// For every RUNNING job with a formed generation that holds `worker_id` as
// an unfinished member and asked any of its members to leave: the ranks that
// leave. What the worker's heartbeat response names in leavers: every member
// hears the whole set, so the first rank to reach a boundary having heard it
// takes every leaver along (release_vote.h).
std::vector<v1::JobLeavers> LeaversFor(const ClusterState& state, const std::string& worker_id);

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
