// The coordinator's in-memory model of jobs, workers and checkpoints, and the
// pure decisions taken on it. Every function here takes (state, now) and does
// no I/O, so tests drive it with a FakeClock and no sockets or sleeps. Callers
// persist what the returned ChangeSet names.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/job_reasons.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

// One fixed member set of a job; a member's rank is its position in `members`.
struct Generation {
  int64_t number = 0;  // 0: the job has not started yet
  std::vector<std::string> members;
  std::set<std::string> finished;  // members whose trainer exited 0
  // False while the job waits for enough workers to form this generation:
  // `members` then holds only the survivors of the previous one, and nobody
  // may join or use it yet.
  bool formed = true;
  GenerationStartReason reason = GenerationStartReason::kStart;  // why it started
  double started_at = 0;  // when it formed
  // The job's committed step when it formed: JoinGenerationResponse's guard
  // (the ranks decide where to start from what they hold).
  int64_t start_step = 0;
  bool committed = false;  // rank 0 reported progress in it

  // -1 when `worker_id` is not a member.
  int64_t RankOf(const std::string& worker_id) const;
};

// A member left out because a peer could not reach it (blamed late): how
// often it failed again right after coming back, which sets how long it
// stays out next time (readmit_backoff.h).
struct ReadmitRecord {
  // Doublings of its back-off: 0 for one lease.
  int strikes = 0;
  // The generation it came back in (0: not back yet). Blamed late again in
  // that very generation, it earns a strike; once a generation with it
  // commits a step, the record goes.
  int64_t readmitted_in = 0;
};

struct JobRecord {
  // What people see. info.spec is the defaulted spec; info.generation and
  // info.workers mirror `generation`; info.step, epoch and samples_in_epoch
  // are the committed state (rank 0's last progress report).
  v1::JobInfo info;
  int64_t submit_seq = 0;  // FIFO order for scheduling
  Generation generation;
  int64_t next_generation = 1;
  int64_t restarts_used = 0;  // generations started after failures (spec.restart_budget)
  std::string last_failure;
  double waiting_since = 0;  // while !generation.formed: when the wait began
  // Loaded by a restarted coordinator and not yet confirmed by its members'
  // heartbeats. Not persisted: every restart sets it again.
  bool recovering = false;
  int64_t version = 0;  // bumped on every change (WatchJob waits on it); not persisted
  // Workers asked to leave this RUNNING job at its next step boundary, with
  // why: worker id -> reason. See release.h.
  std::map<std::string, ReleaseReason> release_requested;
  // While PENDING: why (info.reason is its text). Persisted.
  PendingReason pending_reason = PendingReason::kWaitingForWorkers;
  // The generation asked to re-form at its next step boundary so idle
  // workers can join it (0: none). Not persisted: the growth rule asks again.
  int64_t reform_requested_generation = 0;
  // Workers known to hold no commit of this job in memory: their trainer
  // started afresh (a joiner not held for the job) since the job last
  // committed. A generation whose survivors are all such workers resumes
  // like one without survivors (from the newest checkpoint). Not persisted:
  // a restarted coordinator assumes every member holds one, as before.
  std::set<std::string> without_commit;
  // Members left out because a peer reported them not answering within the
  // collective timeout (a hung trainer), by worker id: none joins a
  // generation of this job again until its trainer answers (JoinGeneration)
  // or ends. Mirrored in info.unresponsive; persisted (state_tables.cc's
  // left_out), so a restarted or new leader keeps a hung member out.
  std::map<std::string, v1::UnresponsiveMember> unresponsive;
  // Members blamed late, by worker id, until a generation with them commits
  // a step (ReadmitRecord). Persisted with `unresponsive`.
  std::map<std::string, ReadmitRecord> readmit;
  // Worker id -> the last formed generation it was a member of. A member
  // cut off from the coordinator may finish training unheard while a loss
  // starts the next generation without it; its trainer's finishing exit for
  // the generation it served still ends the job (ApplyTrainerExit).
  // Persisted.
  std::map<std::string, int64_t> served;
};

struct WorkerRecord {
  std::string id;
  std::string address;
  std::string device_kind;
  int64_t device_count = 0;
  v1::WorkerState state = v1::IDLE;
  std::string job_id;  // set while BUSY; like BUSY, derived from the jobs at load
  double last_heartbeat = 0;
  // From heartbeats since this coordinator started (not persisted): whether
  // one arrived, and the jobs the worker's trainers were running then.
  bool heard = false;
  std::set<std::string> running_jobs;
  // Takes no new job (herd cordon / herd drain); persisted.
  bool cordoned = false;
  // Its daemon is shutting down (a heartbeat said so): leaves its jobs and
  // takes no new one. From heartbeats, not persisted.
  bool draining = false;
  // The daemon process's incarnation from its last registration ("" when
  // unknown). Not persisted: after a coordinator restart the heartbeats'
  // running_jobs tell which members lost their trainers (MarkRestarted).
  std::string incarnation;
  // Its daemon's --label labels, as it last registered; persisted. They
  // change only with a new registration, which a changed label set needs a
  // daemon restart for: the restarted worker leaves its generations.
  std::map<std::string, std::string> labels;

  // Whether new work may be placed on it (it may still be BUSY).
  bool Schedulable() const { return !cordoned && !draining; }

  v1::WorkerInfo ToInfo() const;
};

struct ClusterState {
  std::map<std::string, JobRecord> jobs;
  // Ordered by id: scheduling picks idle workers in this order.
  std::map<std::string, WorkerRecord> workers;
  // Per job, oldest commit first.
  std::map<std::string, std::vector<v1::CheckpointInfo>> checkpoints;
  int64_t next_submit_seq = 1;
  // IDLE worker -> the pending job the scheduler keeps it for while workers
  // released for that job are on their way (scheduling_policy.h). Set anew
  // by every Schedule; not persisted.
  std::map<std::string, std::string> reserved;
  // When this coordinator started serving (0: not yet). Workers it has not
  // heard from within ReconnectWindow of it are presumed gone by the
  // silent-member rule (DropSilentMembersAfterFailure). Not persisted.
  double serving_since = 0;
};

struct StartedGeneration {
  std::string job_id;
  int64_t number = 0;
  GenerationStartReason reason = GenerationStartReason::kStart;
};

struct ReleaseRequested {
  std::string job_id;
  std::string worker_id;
  ReleaseReason reason;
};

// What a decision touched: the caller persists these records and wakes
// watchers.
struct ChangeSet {
  std::set<std::string> jobs;
  // Worker records to save (a registration, a cordon, a death or a return).
  std::set<std::string> workers;
  std::vector<StartedGeneration> generations_started;
  std::vector<Preemption> preemptions;  // one per job preempted
  std::vector<ReleaseRequested> releases_requested;

  bool empty() const { return jobs.empty() && workers.empty(); }
  void Merge(const ChangeSet& other);
};

bool IsFinal(v1::JobState state);

// Adds a PENDING job built from an already validated, defaulted spec.
JobRecord& AddPendingJob(ClusterState& state, const std::string& id, const v1::JobSpec& spec, double now,
                         ChangeSet* changes);

// PENDING/RUNNING -> CANCELLED. NOT_FOUND for unknown ids, FAILED_PRECONDITION
// for final jobs.
absl::StatusOr<ChangeSet> CancelJob(ClusterState& state, const std::string& job_id, double now);

// Inserts or refreshes a worker. It stays BUSY when it is an unfinished member
// of a RUNNING job (re-registering after a coordinator restart), else IDLE.
// ApplyRegistration (generations.h) also handles a restarted daemon.
ChangeSet UpsertWorker(ClusterState& state, const v1::RegisterWorkerRequest& request, double now);

// Sets which workers are BUSY, and with which job, from the jobs alone: the
// members of each RUNNING job's generation (formed or still waiting, whose
// members are its survivors). A store keeps this once, with the job, and
// calls it when it loads the state; a worker's record stores only whether
// it is dead.
void AssignMembersOfRunningJobs(ClusterState& state);

// True when worker `worker_id` registers from a new process: this
// coordinator heard it register before with another incarnation (both
// known), so the old daemon's trainers are gone.
bool IsRestartedWorker(const ClusterState& state, const std::string& worker_id, const std::string& incarnation);

// What `worker_id` should be running: every RUNNING job whose current
// generation has it as an unfinished member.
std::vector<v1::Assignment> AssignmentsFor(const ClusterState& state, const std::string& worker_id);

// The RUNNING job an IDLE worker is held for: its trainer still runs that
// job (its heartbeat says so) although the worker was left out of the job's
// generation (its lease lapsed during a stall or partition), and the job has
// room for it. The trainer keeps its job context and commit while it waits;
// the job takes the worker back at its next join, and no other job may take
// it meanwhile. "" when none.
std::string HeldForJob(const ClusterState& state, const WorkerRecord& worker);

// True while the worker's trainer runs a job that left it out as
// unresponsive (JobRecord::unresponsive): no job takes the worker then.
bool AwaitsTrainerAnswer(const ClusterState& state, const WorkerRecord& worker);

// IDLE workers of the spec's device kind that `job_id` may take: those held
// for it (their trainer still holds its context) and those reserved for it
// first, then free ones, lowest ids first; never one held or (with
// `honor_reservations`) reserved for another job, nor `excluded`, nor a
// cordoned or draining one, nor one whose hung trainer has not answered
// (AwaitsTrainerAnswer), nor one whose labels do not fit the spec's
// placement (placement.h). Reservations: ClusterState::reserved.
std::vector<std::string> IdleWorkersFor(const ClusterState& state, const std::string& job_id, const v1::JobSpec& spec,
                                        const std::string& excluded = "", bool honor_reservations = true);

// How often workers heartbeat for a given lease: ten beats a lease (at most
// 5 per second), so one missed beat is not a lost lease and a silent worker
// shows within about a second.
inline double HeartbeatInterval(double lease_seconds) { return lease_seconds / 10 > 0.2 ? lease_seconds / 10 : 0.2; }

// The longest a live worker takes to reach a coordinator that has just
// started serving: the daemon retries a failed heartbeat at least every
// lease/4 (Daemon::RetryDelay), gRPC reconnects within 2 s
// (GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, common/rpc_options.cc), plus one
// heartbeat interval. With the default lease of 10 s: 5.5 s.
inline double ReconnectWindow(double lease_seconds) {
  return lease_seconds / 4 + 2.0 + HeartbeatInterval(lease_seconds);
}

// The coordinator itself could hear nobody from `last_upkeep` to `now` (it
// was stopped, frozen or starved). When that gap is long enough to cost a
// lease, every live worker's lease restarts from `now`, as after a restart:
// the coordinator's own trouble must not look like the workers'. True when
// it granted that grace.
bool GraceAfterPause(ClusterState& state, double last_upkeep, double now, double lease_seconds);

// A heartbeat that only renewed a lease (OnlyRenewsLease, generations.h),
// recorded outside the state (coordinator/lease_table.h).
struct LeaseRenewal {
  std::string worker_id;
  double heard_at = 0;
};

// Folds renewals recorded since the state last changed into it: each live
// worker's last_heartbeat becomes its renewal's time, as ApplyHeartbeat
// would have set it then. Unknown and DEAD workers are skipped (such a
// heartbeat never renews: it is asked to re-register).
void ApplyLeaseRenewals(ClusterState& state, const std::vector<LeaseRenewal>& renewals);

// Fencing: NOT_FOUND for an unknown job, FAILED_PRECONDITION when
// `generation` is not the job's current one or has not formed yet.
absl::Status CheckCurrentGeneration(const ClusterState& state, const std::string& job_id, int64_t generation);

// Applies a progress report (fields from rank 0 only, and only while RUNNING).
// Rank 0 reports at commit points, so its report is the job's committed state.
// Returns true when the job is no longer RUNNING, i.e. the trainer should stop.
bool ApplyProgress(ClusterState& state, const v1::ReportProgressRequest& report, double now, ChangeSet* changes);

// The progress fields of `report` (step, loss, eval, throughput, warning)
// into the job's record; ApplyProgress and a successful trainer exit's final
// report share it.
void RecordProgress(JobRecord& job, const v1::ReportProgressRequest& report);

// The newest complete checkpoint of a job, or nullptr.
const v1::CheckpointInfo* NewestCheckpoint(const ClusterState& state, const std::string& job_id);

// Adds a checkpoint to its job's catalog and drops the entries beyond the
// newest `keep`; returns the dropped ones (oldest first). An entry of the
// same path (the step written again after a rollback) is dropped too: the
// folder is the new checkpoint's now, so its path must not be deleted.
std::vector<v1::CheckpointInfo> RecordCheckpoint(ClusterState& state, const v1::CheckpointInfo& checkpoint,
                                                 int64_t keep);

// The catalog's entry for this very checkpoint (same job, path and manifest
// digest), or nullptr: a record delivered twice (a lost answer, or the
// worker daemon delivering what an exited trainer left) is answered with it
// instead of listed twice.
const v1::CheckpointInfo* ListedCheckpoint(const ClusterState& state, const v1::CommitCheckpointRequest& record);

}  // namespace herd::coordinator
