// Decisions that start, re-form or end a job's generations: scheduling,
// lost members, trainer exits, reported collective failures, joins below
// max_workers and recovery after a coordinator restart. Pure functions of
// (state, now) like the rest of cluster_state; callers persist the ChangeSet.
//
// A RUNNING job moves to its next generation when a member is lost (lease
// expiry or a non-zero trainer exit), a trainer reports a failure, idle
// workers can join below max_workers, or a restarted coordinator finds a
// member without its trainer. Survivors keep their relative order and come
// first, joiners follow; the new generation starts from the committed state,
// healed from rank 0 when anyone survived and from the newest checkpoint (or
// scratch) otherwise. With fewer than min_workers available the generation
// waits unformed for idle workers, and the job fails after
// min_workers_wait_seconds.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/cluster_state.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

// Why a generation started: GenerationStartReason (job_reasons.h).

struct GenerationOptions {
  // Also the least time between the start of a generation and a join
  // generation of the same job, so a flapping worker cannot thrash it.
  double lease_seconds = 10;
  // How long a job may wait with fewer than min_workers before it fails.
  double min_workers_wait_seconds = 60;
};

// Applies PlanSchedule (scheduling_policy.h): PENDING jobs served by priority,
// then submit order. A job starts once at least min_workers IDLE workers of
// its device kind exist; it takes up to max_workers of them, lowest ids
// first, as ranks 0..W-1 of a new generation. One that does not fit may have
// lower-priority jobs release workers to it (RequestRelease) and keeps the
// idle ones reserved meanwhile; jobs that do not fit otherwise are skipped so
// later, smaller jobs can still start.
ChangeSet Schedule(ClusterState& state, double now);

// Marks workers silent for longer than the lease DEAD. A RUNNING job that
// lost unfinished members moves to its next generation without them
// (member_lost), which costs one unit of its restart budget, except when the
// current generation itself followed a failure and never committed: the lease
// then only confirms the failure already paid for (typically a collective
// timeout reported before the dead peer's lease ran out).
ChangeSet ExpireLeases(ClusterState& state, double now, double lease_seconds);

// After a failure, a member that has not heartbeated since the generation
// that followed it started, although one and a half heartbeat intervals
// (HeartbeatInterval: lease/10) have passed, is presumed gone with the failure (a machine
// that died takes its daemon along) and left out now rather than after a
// whole lease. So is one a restarted coordinator has not heard at all once
// ReconnectWindow has passed since it started serving (a worker killed
// with the coordinator): the survivors need not wait for it at the rendezvous. The
// failure was already paid for, so nothing is charged. A member that was
// only slow loses nothing either: its trainer keeps its job context and the
// job re-admits it (HeldForJob).
ChangeSet DropSilentMembersAfterFailure(ClusterState& state, double now, double lease_seconds);

// A worker registers (UpsertWorker). When it names another incarnation than
// its previous registration did, its daemon restarted and the old process's
// trainers are gone: it leaves every generation it was a member of at once,
// like a lost lease (member_lost; nothing charged when the generation itself
// followed a failure and never committed, so a whole job restarting costs
// one unit of budget), and is free to join the next one. Its peers never
// rendezvous with the dead trainers' addresses: each generation has its own
// key scope, and the old one is dropped.
// `incarnation`: the daemon process's (common/incarnation.h), "" if unknown.
ChangeSet ApplyRegistration(ClusterState& state, const v1::RegisterWorkerRequest& request,
                            const std::string& incarnation, double now);

// A heartbeat from a known worker: refreshes its lease, records which jobs its
// trainers run and applies the trainer exits it carries.
ChangeSet ApplyHeartbeat(ClusterState& state, const v1::HeartbeatRequest& request, double now);

// True when ApplyHeartbeat would change nothing but the worker's
// last_heartbeat: a known, live worker already heard since this coordinator
// started, reporting the same running jobs, no exits, no drain, and no job
// waiting for its hung trainer that it no longer runs. Such a heartbeat
// renews the lease without taking the state lock exclusively
// (coordinator/lease_table.h); any other goes through ApplyHeartbeat.
bool OnlyRenewsLease(const ClusterState& state, const v1::HeartbeatRequest& request);

// A trainer exit reported in a heartbeat. Exit 0 marks the member finished and
// the job SUCCEEDED once every member has. TRAINER_EXIT_RELEASED: the member
// left at a step boundary every rank committed, so the next generation starts
// without it from that commit (released, no budget charged), and the worker
// is freed; its final report is the boundary's. Any other code is a member
// failure: the next generation starts without it (member_lost, budget
// charged). Exits for another generation or for final jobs are ignored,
// except a release the job asked for: a worker released at the same boundary
// as another may find the job already in the next generation.
// TRAINER_EXIT_RELEASED_ALL: every rank left at one boundary whose
// checkpoint rank 0 had recorded; the job goes back to PENDING when all were
// asked to leave for a suspension (it resumes from that checkpoint when
// scheduled again), and otherwise (drain) starts its next generation from
// it on other workers.
ChangeSet ApplyTrainerExit(ClusterState& state, const std::string& worker_id, const v1::TrainerExit& exit, double now);

// A member's trainer ended `generation` at a step boundary every rank
// committed, because the job was asked to re-form there (reform_jobs): the
// next generation starts with every member, healed from that commit, and
// the idle workers that can join (join, no budget charged). Later calls for
// the same generation find it gone and change nothing. FAILED_PRECONDITION
// for a job that is not RUNNING, NOT_FOUND for an unknown one.
absl::StatusOr<ChangeSet> ReformAtBoundary(ClusterState& state, const std::string& job_id, const std::string& worker_id,
                                           int64_t generation, double now);

// ReportFailure: a member saw a collective fail in the current generation.
// The next generation keeps every member, the reporter included
// (failure_reported, budget charged), except the one the report blames
// (peer_fault): a closed peer's process ended, so it is left out at once
// rather than after its lease; a late one is also recorded as unresponsive
// (JobRecord::unresponsive), so it joins no generation until its trainer
// answers. Trainers report before they close their connections, so the
// first report of a generation blames the member that failed first. Fenced like every generation-scoped
// call; FAILED_PRECONDITION for final jobs and non-members. A report with
// job_error (the job's own failure: its model, its data, its memory) fails
// the job at once with the reporter's message, spending no budget, from the
// current generation or an earlier one the reporter was a member of.
absl::StatusOr<ChangeSet> ApplyFailureReport(ClusterState& state, const v1::ReportFailureRequest& report, double now);

// The trainer of `worker_id` called for `job_id` (JoinGeneration): a member
// left out as unresponsive answers again, and may join the job's next
// generation (the growth rule re-forms to take it back).
ChangeSet TrainerAnswered(ClusterState& state, const std::string& job_id, const std::string& worker_id, double now);

// One round of generation upkeep, in priority order for idle workers: jobs
// waiting for workers form their generation (or fail after the wait), jobs
// recovering from a coordinator restart are confirmed or re-formed, PENDING
// jobs are scheduled, and RUNNING jobs below max_workers that idle workers
// could join are asked to re-form at their next step boundary.
ChangeSet AdvanceGenerations(ClusterState& state, double now, const GenerationOptions& options);

// Call once on a state loaded by a (re)started coordinator. A RUNNING job
// keeps its generation if every unfinished member heartbeats with its trainer
// still running; as soon as all have heartbeated and one has not, the job
// starts a coordinator_restart generation (no budget charged) with the
// members that still run it as survivors. Members that never come back are
// lost by lease expiry as usual. Jobs waiting for workers get a fresh wait.
// Members left out as hung (JobRecord::unresponsive) stay out, with their
// back-offs, until their trainers answer.
void MarkRestarted(ClusterState& state, double now);

}  // namespace herd::coordinator
