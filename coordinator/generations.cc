#include "coordinator/generations.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec_enums.h"
#include "coordinator/island_members.h"
#include "coordinator/readmit_backoff.h"
#include "coordinator/placement.h"
#include "coordinator/release.h"
#include "coordinator/scheduling_policy.h"
#include "coordinator/state_edits.h"

namespace herd::coordinator {
namespace {

// A reported failure message is kept in the job's reason; bound its size.
constexpr size_t kMaxFailureMessage = 512;

bool Contains(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::vector<std::string> UnfinishedMembers(const Generation& generation, const std::string& except = "") {
  std::vector<std::string> members;
  for (const std::string& member : generation.members) {
    if (member != except && !generation.finished.count(member)) members.push_back(member);
  }
  return members;
}

std::string Described(const Generation& generation, const std::vector<std::string>& workers) {
  std::vector<std::string> parts;
  for (const std::string& id : workers) parts.push_back(absl::StrCat(id, " (rank ", generation.RankOf(id), ")"));
  return absl::StrCat(workers.size() == 1 ? "worker " : "workers ", absl::StrJoin(parts, ", "));
}

void MirrorUnresponsive(JobRecord& job) {
  job.info.clear_unresponsive();
  for (const auto& [id, member] : job.unresponsive) *job.info.add_unresponsive() = member;
}

// The job stops waiting for `worker_id`'s hung trainer: it answered or ended.
void ForgetUnresponsive(JobRecord& job, const std::string& worker_id, double now, ChangeSet* changes) {
  if (job.unresponsive.erase(worker_id) == 0) return;
  MirrorUnresponsive(job);
  Touch(job, now, changes);
}

void MirrorGeneration(JobRecord& job) {
  job.info.set_generation(job.generation.number);
  job.info.set_world_size(static_cast<int64_t>(job.generation.members.size()));
  job.info.clear_workers();
  for (const std::string& member : job.generation.members) job.info.add_workers(member);
}

// The one place a generation forms: the current members (survivors of the
// previous generation, possibly none) plus `joiners` become ranks 0..W-1, and
// the start state, mirrors and BUSY states change together.
void Form(ClusterState& state, JobRecord& job, const std::vector<std::string>& joiners, double now,
          ChangeSet* changes) {
  Generation& generation = job.generation;
  v1::JobInfo& info = job.info;
  // Survivors whose trainer started afresh since the last commit (e.g. each
  // restarted with its daemon, one after the other) hold nothing to heal from.
  const bool survivors_hold = std::any_of(generation.members.begin(), generation.members.end(),
                                          [&](const std::string& id) { return !job.without_commit.count(id); });
  for (const std::string& id : joiners) {
    // Computed before the joiners turn BUSY: a worker held for the job keeps
    // its trainer and the commit it holds.
    if (HeldForJob(state, state.workers.at(id)) != info.id()) job.without_commit.insert(id);
  }
  // Survivors hold the committed state in memory and the ranks heal from
  // it (worker/train/generation/healing.h): the committed step stands.
  if (!survivors_hold) {
    // Every member was lost at once (e.g. the coordinator was cut off from
    // all of them, or every daemon restarted), but a joiner held for the job
    // still runs its trainer, which kept its commit in memory: the ranks heal
    // from the newest one, so the committed step stands. Resetting it here
    // made `herd status` show the step going back until rank 0 reported
    // again.
    const bool commit_held = std::any_of(joiners.begin(), joiners.end(),
                                         [&](const std::string& id) { return !job.without_commit.count(id); });
    if (!commit_held) {
      // Nobody holds it: resume from the newest checkpoint, or from scratch.
      const v1::CheckpointInfo* checkpoint = NewestCheckpoint(state, info.id());
      info.set_step(checkpoint != nullptr ? checkpoint->step() : 0);
      info.set_epoch(checkpoint != nullptr ? checkpoint->epoch() : 0);
      info.set_samples_in_epoch(checkpoint != nullptr ? checkpoint->samples_in_epoch() : 0);
    }
  }
  generation.members.insert(generation.members.end(), joiners.begin(), joiners.end());
  if (!info.spec().sync().islands_by().empty()) {
    std::map<std::string, WorkerLabels> labels_of;
    for (const std::string& member : generation.members) labels_of[member] = state.workers.at(member).labels;
    generation.members = OrderedByIsland(generation.members, labels_of, info.spec());
  }
  for (const std::string& member : generation.members) {
    // Back after being left out late: blamed late again in this very
    // generation, it stays out twice as long (readmit_backoff.h).
    auto readmit = job.readmit.find(member);
    if (readmit != job.readmit.end() && readmit->second.readmitted_in == 0) {
      readmit->second.readmitted_in = generation.number;
    }
  }
  generation.finished.clear();
  generation.formed = true;
  generation.started_at = now;
  generation.committed = false;
  generation.start_step = info.step();
  for (const std::string& member : generation.members) {
    SetWorker(state.workers.at(member), v1::BUSY, info.id(), changes);
    job.served[member] = generation.number;
  }
  MirrorGeneration(job);
  info.set_state(v1::RUNNING);
  info.set_reason("");
  job.waiting_since = 0;
  job.recovering = false;
  Touch(job, now, changes);
  changes->generations_started.push_back({info.id(), generation.number, generation.reason});
}

// Forms the job's unformed generation when its survivors plus idle workers
// reach min_workers; false (and nothing changed) otherwise.
bool TryForm(ClusterState& state, JobRecord& job, const std::string& excluded, double now, ChangeSet* changes) {
  const v1::JobSpec& spec = job.info.spec();
  Generation& generation = job.generation;
  const std::vector<std::string> idle = IdleWorkersFor(state, job.info.id(), spec, excluded);
  // A job that just gave a worker away takes idle ones only to reach
  // min_workers: growing is for join generations, after pending jobs were
  // served, or it would take back what it released for another job.
  const int64_t want = generation.reason == GenerationStartReason::kReleased ? spec.min_workers() : spec.max_workers();
  // With islands, one short of its minimum sits out (island_members.h).
  const std::vector<std::string> chosen = ChooseMembers(state, spec, generation.members, idle, want);
  if (static_cast<int64_t>(chosen.size()) < spec.min_workers()) return false;
  std::vector<std::string> survivors, joiners;
  for (const std::string& id : chosen) (Contains(generation.members, id) ? survivors : joiners).push_back(id);
  // Never form from older state than a survivor holds: when only survivors
  // of islands that sit out hold the commit, the job waits for them to
  // have enough rather than start over from a checkpoint.
  const auto holds_commit = [&](const std::string& id) {
    return !job.without_commit.count(id) &&
           (Contains(generation.members, id) || HeldForJob(state, state.workers.at(id)) == job.info.id());
  };
  if (std::none_of(chosen.begin(), chosen.end(), holds_commit) &&
      std::any_of(generation.members.begin(), generation.members.end(), holds_commit)) {
    return false;
  }
  for (const std::string& member : generation.members) {
    // A survivor whose island sits out: its trainer keeps its commit and
    // the job holds it (HeldForJob) until its island can rejoin.
    if (!Contains(survivors, member)) ReleaseWorker(state, member, job.info.id(), changes);
  }
  std::vector<std::string> candidates = generation.members;
  candidates.insert(candidates.end(), idle.begin(), idle.end());
  const std::map<std::string, int64_t> sitting_out = IslandsSittingOut(state, spec, candidates, chosen);
  generation.members = survivors;
  Form(state, job, joiners, now, changes);
  // Why an island with workers at hand does not train, until the next one forms.
  if (!sitting_out.empty()) {
    job.info.set_reason(IslandsSittingOutText(sitting_out, spec.sync().min_workers_per_island()));
  }
  return true;
}

// The job stays RUNNING with an unformed generation until workers come.
void Wait(JobRecord& job, double now, ChangeSet* changes) {
  MirrorGeneration(job);
  job.info.set_reason(
      WaitingToFormText(static_cast<int64_t>(job.generation.members.size()), job.info.spec().min_workers()));
  Touch(job, now, changes);
}

// Begins the job's next generation. `keep` are members of the current one
// that stay, in rank order, because their trainers hold the committed state;
// the other members are released. A failure (`charge`) first spends one unit
// of the restart budget, or fails the job when none is left. `excluded` (the
// worker whose trainer just failed) is not taken back at once.
void NextGeneration(ClusterState& state, JobRecord& job, std::vector<std::string> keep, GenerationStartReason reason,
                    const std::string& cause, bool charge, const std::string& excluded, double now,
                    ChangeSet* changes) {
  if (charge) {
    const int64_t budget = job.info.spec().restart_budget();
    // The reason names the root cause: the first failure since the job last
    // committed, not the echo of its peers that followed.
    const std::string& first = job.last_failure.empty() ? cause : job.last_failure;
    if (job.restarts_used >= budget) {
      FinishJob(state, job, v1::FAILED,
                first == cause ? absl::StrCat("restart budget (", budget, ") exhausted; failure: ", cause)
                               : absl::StrCat("restart budget (", budget, ") exhausted; first failure: ", first,
                                              "; last failure: ", cause),
                now, changes);
      return;
    }
    ++job.restarts_used;
    if (job.last_failure.empty() || job.generation.committed) job.last_failure = cause;
  }
  for (const std::string& member : job.generation.members) {
    if (!Contains(keep, member)) ReleaseWorker(state, member, job.info.id(), changes);
  }
  Generation& generation = job.generation;
  generation.number = job.next_generation++;
  generation.members = std::move(keep);
  generation.finished.clear();
  generation.formed = false;
  generation.reason = reason;
  generation.started_at = 0;
  generation.committed = false;
  job.recovering = false;
  job.waiting_since = now;
  if (!TryForm(state, job, excluded, now, changes)) Wait(job, now, changes);
}

// Unfinished members of a RUNNING job are gone (lease expired).
void MembersLost(ClusterState& state, JobRecord& job, const std::vector<std::string>& lost, const std::string& why,
                 double now, ChangeSet* changes) {
  Generation& generation = job.generation;
  std::vector<std::string> gone;
  for (const std::string& id : lost) {
    if (generation.RankOf(id) >= 0 && !generation.finished.count(id)) gone.push_back(id);
  }
  if (gone.empty()) return;
  const std::string cause = absl::StrCat(Described(generation, gone), " lost: ", why);
  std::vector<std::string> keep;
  for (const std::string& member : UnfinishedMembers(generation)) {
    if (!Contains(gone, member)) keep.push_back(member);
  }
  if (!generation.formed) {
    // Still waiting: fewer survivors, no new generation, nothing charged.
    generation.members = keep;
    Wait(job, now, changes);
    return;
  }
  const bool already_paid = IsFailure(generation.reason) && !generation.committed;
  NextGeneration(state, job, keep, GenerationStartReason::kMemberLost, cause, /*charge=*/!already_paid, "", now,
                 changes);
}

// A RUNNING job loaded by a restarted coordinator, once every unfinished
// member has heartbeated: keep the generation if all still run the trainer.
void ResolveRecovery(ClusterState& state, JobRecord& job, double now, ChangeSet* changes) {
  const std::vector<std::string> members = UnfinishedMembers(job.generation);
  std::vector<std::string> running;
  for (const std::string& member : members) {
    auto worker = state.workers.find(member);
    if (worker == state.workers.end() || !worker->second.heard) return;
    if (worker->second.running_jobs.count(job.info.id())) running.push_back(member);
  }
  job.recovering = false;
  if (running.size() == members.size()) return;
  NextGeneration(state, job, running, GenerationStartReason::kCoordinatorRestart, "coordinator restarted",
                 /*charge=*/false, "", now, changes);
}

// Every rank left at one boundary, after rank 0 had that step's checkpoint
// recorded (TRAINER_EXIT_RELEASED_ALL, from the first member to say so):
// nobody holds the commit in memory any more, the checkpoint does.
void EndedByAllLeaving(ClusterState& state, JobRecord& job, double now, ChangeSet* changes) {
  const bool suspend = std::any_of(job.release_requested.begin(), job.release_requested.end(),
                                   [](const auto& request) { return request.second == ReleaseReason::kSuspend; });
  job.release_requested.clear();
  // Nobody holds the boundary in memory, only its checkpoint: the job waits
  // to be scheduled again like a new one (no timeout, no restart charged),
  // on whichever workers are free, in priority order.
  for (const std::string& member : job.generation.members) ReleaseWorker(state, member, job.info.id(), changes);
  job.generation = Generation{};
  const v1::CheckpointInfo* checkpoint = NewestCheckpoint(state, job.info.id());
  const std::string from = checkpoint != nullptr ? checkpoint->path() : "its checkpoint";
  job.info.set_state(v1::PENDING);
  job.pending_reason = suspend ? PendingReason::kSuspended : PendingReason::kAllReleased;
  job.info.set_reason(suspend ? SuspendedText(job.info.step(), from) : AllReleasedText(job.info.step(), from));
  MirrorGeneration(job);
  job.waiting_since = 0;
  job.recovering = false;
  Touch(job, now, changes);
}

std::vector<JobRecord*> RunningJobsInSubmitOrder(ClusterState& state) {
  std::vector<JobRecord*> running;
  for (auto& [id, job] : state.jobs) {
    if (job.info.state() == v1::RUNNING) running.push_back(&job);
  }
  std::sort(running.begin(), running.end(),
            [](const JobRecord* a, const JobRecord* b) { return a->submit_seq < b->submit_seq; });
  return running;
}

// Registered workers whose lease holds, of the spec's device kind and
// fitting its placement, busy or not.
int64_t LiveWorkersFitting(const ClusterState& state, const v1::JobSpec& spec) {
  return std::count_if(state.workers.begin(), state.workers.end(), [&](const auto& entry) {
    const WorkerRecord& worker = entry.second;
    return worker.state != v1::DEAD && worker.device_kind == SpecName(spec.device()) &&
           FitsPlacement(worker.labels, spec);
  });
}

// The unfinished member other than the reporter that a failure report
// blames (ReportFailureRequest.peer_fault), or "".
std::string BlamedMember(const Generation& generation, const v1::ReportFailureRequest& report, int64_t reporter) {
  if (report.peer_fault() == v1::PEER_FAULT_NONE) return "";
  const int64_t rank = report.peer_rank();
  if (rank < 0 || rank >= static_cast<int64_t>(generation.members.size()) || rank == reporter) return "";
  const std::string& member = generation.members[rank];
  return generation.finished.count(member) ? "" : member;
}

}  // namespace

ChangeSet Schedule(ClusterState& state, double now) {
  ChangeSet changes;
  const SchedulePlan plan = PlanSchedule(state);
  for (const JobStart& start : plan.starts) {
    JobRecord& job = state.jobs.at(start.job_id);
    job.generation = Generation{};
    job.generation.number = job.next_generation++;
    job.generation.reason = GenerationStartReason::kStart;
    Form(state, job, start.workers, now, &changes);
  }
  for (const MemberRelease& release : plan.releases) {
    changes.Merge(RequestRelease(state, release.job_id, release.worker_id, release.reason, now));
  }
  for (const auto& [job_id, kind] : plan.preempted) changes.preemptions.push_back(kind);
  for (auto& [job_id, job] : state.jobs) {
    if (job.info.state() != v1::PENDING) continue;
    auto waiting = plan.waiting.find(job_id);
    PendingReason pending = job.pending_reason;
    std::string reason = job.info.reason();
    const int64_t fitting = HasPlacement(job.info.spec()) ? LiveWorkersFitting(state, job.info.spec()) : -1;
    if (waiting != plan.waiting.end()) {
      pending = PendingReason::kWaitingForReleasedWorkers;
      reason = WaitingForReleasedWorkersText(waiting->second.have, waiting->second.need);
    } else if (fitting >= 0 && fitting < job.info.spec().min_workers() &&
               (pending == PendingReason::kWaitingForWorkers || pending == PendingReason::kNoFittingWorkers)) {
      // Not even every live worker would do: say which labels it waits for.
      pending = PendingReason::kNoFittingWorkers;
      reason = NoFittingWorkersText(PlacementText(job.info.spec()), fitting, job.info.spec().min_workers());
    } else if (pending == PendingReason::kWaitingForReleasedWorkers || pending == PendingReason::kNoFittingWorkers) {
      // Back to the plain reason once preempting can no longer start it, or
      // enough fitting workers registered.
      pending = PendingReason::kWaitingForWorkers;
      reason = WaitingForWorkersText();
    }
    if (job.pending_reason == pending && job.info.reason() == reason) continue;
    job.pending_reason = pending;
    job.info.set_reason(reason);
    Touch(job, now, &changes);
  }
  state.reserved = plan.reserved;
  return changes;
}

ChangeSet ExpireLeases(ClusterState& state, double now, double lease_seconds) {
  ChangeSet changes;
  // All expired workers are marked first, so a job that lost several at once
  // moves to one new generation, not one per worker.
  std::map<std::string, std::vector<std::string>> lost_by_job;
  for (auto& [id, worker] : state.workers) {
    if (worker.state == v1::DEAD || now - worker.last_heartbeat <= lease_seconds) continue;
    if (!worker.job_id.empty()) lost_by_job[worker.job_id].push_back(id);
    SetWorker(worker, v1::DEAD, "", &changes);
  }
  for (const auto& [job_id, lost] : lost_by_job) {
    auto it = state.jobs.find(job_id);
    if (it == state.jobs.end() || it->second.info.state() != v1::RUNNING) continue;
    MembersLost(state, it->second, lost, "lease expired", now, &changes);
  }
  return changes;
}

ChangeSet DropSilentMembersAfterFailure(ClusterState& state, double now, double lease_seconds) {
  ChangeSet changes;
  const double heartbeat_interval = HeartbeatInterval(lease_seconds);
  for (JobRecord* job : RunningJobsInSubmitOrder(state)) {
    const Generation& generation = job->generation;
    if (!generation.formed || job->recovering || generation.committed || !IsFailure(generation.reason)) continue;
    if (now - generation.started_at < 1.5 * heartbeat_interval) continue;
    // A restarted coordinator gave every worker it loaded a long grace on
    // its lease (Coordinator::StartServing), so last_heartbeat says nothing
    // about those it never heard; past the reconnect window a live one
    // would have called.
    const bool reconnect_window_over =
        state.serving_since > 0 && now >= state.serving_since + ReconnectWindow(lease_seconds);
    std::vector<std::string> silent;
    for (const std::string& member : UnfinishedMembers(generation)) {
      auto worker = state.workers.find(member);
      if (worker == state.workers.end() || worker->second.last_heartbeat <= generation.started_at ||
          (!worker->second.heard && reconnect_window_over)) {
        silent.push_back(member);
      }
    }
    // Never everyone: that is the coordinator's own silence, not theirs.
    if (silent.empty() || silent.size() == UnfinishedMembers(generation).size()) continue;
    // As if their lease had expired: one that is alive after all registers
    // again at its next heartbeat and is re-admitted with its trainer.
    for (const std::string& id : silent) {
      auto worker = state.workers.find(id);
      if (worker != state.workers.end()) SetWorker(worker->second, v1::DEAD, "", &changes);
    }
    MembersLost(state, *job, silent, "silent since the failure", now, &changes);
  }
  return changes;
}

ChangeSet ApplyRegistration(ClusterState& state, const v1::RegisterWorkerRequest& request,
                            const std::string& incarnation, double now) {
  const bool restarted = IsRestartedWorker(state, request.worker_id(), incarnation);
  ChangeSet changes = UpsertWorker(state, request, now);
  WorkerRecord& worker = state.workers.at(request.worker_id());
  if (!incarnation.empty()) worker.incarnation = incarnation;
  if (!restarted) return changes;
  // Its trainers exited with the old daemon (they leave with their parent):
  // it is held for no job, and no generation may wait for them.
  worker.running_jobs.clear();
  for (JobRecord* job : RunningJobsInSubmitOrder(state)) {
    if (job->generation.RankOf(worker.id) < 0) continue;
    MembersLost(state, *job, {worker.id}, "its daemon restarted, and its trainer ended with the old process", now,
                &changes);
    // Out of a generation still waiting to form, it is free again too (a
    // formed one released it already); the next upkeep may take it back.
    if (worker.job_id == job->info.id() && job->generation.RankOf(worker.id) < 0) {
      ReleaseWorker(state, worker.id, job->info.id(), &changes);
    }
  }
  return changes;
}

ChangeSet ApplyHeartbeat(ClusterState& state, const v1::HeartbeatRequest& request, double now) {
  WorkerRecord& worker = state.workers.at(request.worker_id());
  worker.last_heartbeat = now;
  worker.heard = true;
  worker.running_jobs = std::set<std::string>(request.running_jobs().begin(), request.running_jobs().end());
  ChangeSet changes;
  // A hung trainer that ended (its daemon stopped it) holds nothing to wait for.
  for (auto& [id, job] : state.jobs) {
    if (job.unresponsive.count(worker.id) && !worker.running_jobs.count(id)) {
      ForgetUnresponsive(job, worker.id, now, &changes);
    }
  }
  for (const v1::TrainerExit& exit : request.exits()) {
    changes.Merge(ApplyTrainerExit(state, request.worker_id(), exit, now));
  }
  // A restarted daemon no longer drains; one that does says so every beat.
  worker.draining = false;
  if (request.draining()) changes.Merge(MarkDraining(state, request.worker_id(), now));
  return changes;
}

bool OnlyRenewsLease(const ClusterState& state, const v1::HeartbeatRequest& request) {
  auto it = state.workers.find(request.worker_id());
  if (it == state.workers.end()) return false;
  const WorkerRecord& worker = it->second;
  if (worker.state == v1::DEAD || !worker.heard || worker.draining || request.draining() ||
      request.exits_size() > 0) {
    return false;
  }
  if (static_cast<size_t>(request.running_jobs_size()) != worker.running_jobs.size()) return false;
  for (const std::string& job_id : request.running_jobs()) {
    if (!worker.running_jobs.count(job_id)) return false;
  }
  for (const auto& [id, job] : state.jobs) {
    if (job.unresponsive.count(worker.id) && !worker.running_jobs.count(id)) return false;
  }
  return true;
}

ChangeSet ApplyTrainerExit(ClusterState& state, const std::string& worker_id, const v1::TrainerExit& exit, double now) {
  ChangeSet changes;
  auto it = state.jobs.find(exit.job_id());
  if (it == state.jobs.end()) return changes;
  JobRecord& job = it->second;
  Generation& generation = job.generation;
  if (job.info.state() != v1::RUNNING) return changes;
  const bool finished_training = exit.exit_code() == v1::TRAINER_EXIT_OK && exit.has_final_progress();
  // Only a worker the job holds may end it: a worker credential must not
  // fail other jobs by naming them. A finishing exit also counts from a
  // worker that served in the generation it names, though a loss (its lease
  // lapsed while it trained on, cut off) let it go since.
  auto worker = state.workers.find(worker_id);
  auto served = job.served.find(worker_id);
  const bool holds_job = generation.RankOf(worker_id) >= 0 ||
                         (worker != state.workers.end() && worker->second.job_id == job.info.id()) ||
                         (finished_training && served != job.served.end() && served->second == exit.generation());
  if (!holds_job) return changes;
  if (exit.exit_code() == v1::TRAINER_EXIT_JOB_ERROR) {
    // Whatever generation it came from, another one would fail the same way.
    FinishJob(state, job, v1::FAILED,
              absl::StrCat("worker ", worker_id, " trainer failed: ", exit.message().substr(0, kMaxFailureMessage)),
              now, &changes);
    return changes;
  }
  const bool release_all = exit.exit_code() == v1::TRAINER_EXIT_RELEASED_ALL;
  const bool release = exit.exit_code() == v1::TRAINER_EXIT_RELEASED || release_all;
  const bool release_asked = job.release_requested.count(worker_id) > 0;
  // A trainer that exits OK with its final report passed the final commit
  // point, whose collectives (replica check, final agreement) every rank of
  // its generation took part in: training is complete. A member lost after
  // that, even one whose loss already re-formed the job, costs nothing.
  if (finished_training && exit.generation() != generation.number) {
    if (exit.final_progress().step() >= job.info.step()) RecordProgress(job, exit.final_progress());
    FinishJob(state, job, v1::SUCCEEDED, "", now, &changes);
    return changes;
  }
  if (exit.generation() != generation.number && !(release && release_asked)) return changes;
  const int64_t rank = generation.RankOf(worker_id);
  if (rank < 0) return changes;
  if (release) {
    // The leaver may be rank 0: its boundary report rides with the exit.
    if (exit.has_final_progress() && exit.final_progress().step() > job.info.step()) {
      RecordProgress(job, exit.final_progress());
    }
    if (release_all && release_asked && generation.formed) {
      EndedByAllLeaving(state, job, now, &changes);
      return changes;
    }
    job.release_requested.erase(worker_id);
  }

  if (!generation.formed) {
    // A survivor's trainer ended while the job waits: it no longer holds the
    // committed state, so it is no survivor (it may come back as a joiner).
    generation.members.erase(generation.members.begin() + rank);
    ReleaseWorker(state, worker_id, job.info.id(), &changes);
    Wait(job, now, &changes);
    return changes;
  }
  if (release) {
    // Every other rank committed the same boundary and holds it in memory:
    // nothing was lost, nothing is charged.
    NextGeneration(state, job, UnfinishedMembers(generation, worker_id), GenerationStartReason::kReleased,
                   absl::StrCat("worker ", worker_id, " released"), /*charge=*/false, worker_id, now, &changes);
    return changes;
  }
  if (exit.exit_code() != 0 && !generation.finished.empty()) {
    // Another rank finished training (see finished_training): this one was
    // lost after the final commit point; the job's result is complete.
    generation.finished.insert(worker_id);
    if (generation.finished.size() == generation.members.size()) {
      FinishJob(state, job, v1::SUCCEEDED, "", now, &changes);
    } else {
      Touch(job, now, &changes);
    }
    return changes;
  }
  if (exit.exit_code() != 0) {
    std::string cause =
        absl::StrCat("worker ", worker_id, " (rank ", rank, ") trainer exited with code ", exit.exit_code());
    if (!exit.message().empty()) absl::StrAppend(&cause, ": ", exit.message());
    NextGeneration(state, job, UnfinishedMembers(generation, worker_id), GenerationStartReason::kMemberLost, cause,
                   /*charge=*/true, worker_id, now, &changes);
    return changes;
  }
  if (!generation.finished.insert(worker_id).second) return changes;  // a repeated report
  // Its final report rides with the exit: the end of training reaches the
  // record even when the coordinator missed the last progress report.
  // Rank 0's report is the record (it alone writes checkpoints and knows
  // their warning); another rank's counts only when it is newer.
  if (exit.has_final_progress() &&
      (exit.final_progress().step() > job.info.step() || (rank == 0 && exit.final_progress().step() == job.info.step()))) {
    RecordProgress(job, exit.final_progress());
    generation.committed = true;
    job.without_commit.clear();
  }
  if (generation.finished.size() == generation.members.size()) {
    FinishJob(state, job, v1::SUCCEEDED, "", now, &changes);
  } else {
    Touch(job, now, &changes);
  }
  return changes;
}

absl::StatusOr<ChangeSet> ReformAtBoundary(ClusterState& state, const std::string& job_id, const std::string& worker_id,
                                           int64_t generation, double now) {
  auto it = state.jobs.find(job_id);
  if (it == state.jobs.end()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  JobRecord& job = it->second;
  if (job.info.state() != v1::RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job.info.state())));
  }
  ChangeSet changes;
  // Another rank of the same boundary came first, or the generation ended
  // otherwise meanwhile: the join waits for whatever comes next.
  if (!job.generation.formed || job.generation.number != generation || job.generation.RankOf(worker_id) < 0) {
    return changes;
  }
  NextGeneration(state, job, UnfinishedMembers(job.generation), GenerationStartReason::kJoin, "", /*charge=*/false, "",
                 now, &changes);
  return changes;
}

// A failure another generation would repeat: the job fails now, with the
// reporter's message as its reason. Not fenced by the generation, like a
// TRAINER_EXIT_JOB_ERROR exit: a peer's report of the collective the error
// broke may have started the next one first.
absl::StatusOr<ChangeSet> ApplyJobErrorReport(ClusterState& state, const v1::ReportFailureRequest& report, double now) {
  auto it = state.jobs.find(report.job_id());
  if (it == state.jobs.end()) return absl::NotFoundError(absl::StrCat("job ", report.job_id(), " not found"));
  JobRecord& job = it->second;
  if (job.info.state() != v1::RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", report.job_id(), " is ", v1::JobState_Name(job.info.state())));
  }
  if (report.generation() > job.generation.number) {
    return absl::InvalidArgumentError(absl::StrCat("generation: ", report.generation(), " of job ", report.job_id(),
                                                   " has not started (current: ", job.generation.number, ")"));
  }
  // Only a worker the job holds may end it.
  auto worker = state.workers.find(report.worker_id());
  const bool holds_job = job.generation.RankOf(report.worker_id()) >= 0 ||
                         (worker != state.workers.end() && worker->second.job_id == job.info.id());
  if (!holds_job) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", report.worker_id(), " is not a member of job ", report.job_id()));
  }
  ChangeSet changes;
  FinishJob(state, job, v1::FAILED,
            absl::StrCat("worker ", report.worker_id(), " (rank ", report.rank(), ") trainer failed: ",
                         report.message().substr(0, kMaxFailureMessage)),
            now, &changes);
  return changes;
}

absl::StatusOr<ChangeSet> ApplyFailureReport(ClusterState& state, const v1::ReportFailureRequest& report, double now) {
  if (report.job_error()) return ApplyJobErrorReport(state, report, now);
  if (auto status = CheckCurrentGeneration(state, report.job_id(), report.generation()); !status.ok()) return status;
  JobRecord& job = state.jobs.at(report.job_id());
  if (job.info.state() != v1::RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", report.job_id(), " is ", v1::JobState_Name(job.info.state())));
  }
  Generation& generation = job.generation;
  const int64_t rank = generation.RankOf(report.worker_id());
  if (rank < 0) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", report.worker_id(), " is not a member of job ",
                                                      report.job_id(), " generation ", generation.number));
  }
  if (rank != report.rank()) {
    return absl::InvalidArgumentError(absl::StrCat("rank: worker ", report.worker_id(), " is rank ", rank,
                                                   " of generation ", generation.number, ", not ", report.rank()));
  }
  ChangeSet changes;
  if (generation.finished.count(report.worker_id())) return changes;  // its trainer is done: nothing to heal
  const std::string cause = absl::StrCat("worker ", report.worker_id(), " (rank ", rank,
                                         ") reported a failure: ", report.message().substr(0, kMaxFailureMessage));
  // The member the failed collective blames is left out at once: trainers
  // report before they close their own connections, so the first report
  // names the member that failed first, not an echo.
  std::vector<std::string> keep = UnfinishedMembers(generation);
  const std::string blamed = BlamedMember(generation, report, rank);
  bool retry_failed = false;
  if (!blamed.empty()) {
    std::vector<std::string> left_out = {blamed};
    if (report.peer_fault() == v1::PEER_FAULT_LATE) {
      // Late: it (with islands and a cut link, its whole island, or the
      // reporter's) stays out until its trainer answers and its back-off is over.
      // The link that failed is the blamer's: the reporter's own, or one it
      // followed the blames to (ReportFailureRequest.peer_blamed_by).
      std::string blamer = report.worker_id();
      if (report.has_peer_blamed_by() && report.peer_blamed_by() >= 0 &&
          report.peer_blamed_by() < static_cast<int64_t>(generation.members.size()) &&
          generation.members[static_cast<size_t>(report.peer_blamed_by())] != blamed) {
        blamer = generation.members[static_cast<size_t>(report.peer_blamed_by())];
      }
      LateBlameOutcome outcome = LeftOutForLateBlame(state, job, blamer, blamed, report.peer_roll_call());
      left_out = outcome.left_out;
      // Every one of them came back in this generation after a back-off and
      // failed again: the partition already paid for, now paid for by a
      // longer back-off rather than the restart budget.
      retry_failed = std::all_of(left_out.begin(), left_out.end(),
                                 [&](const std::string& id) { return ReadmittedIn(job, id, generation.number); });
      for (const std::string& id : left_out) {
        auto record = job.readmit.find(id);
        const int strikes =
            StrikesAfterBlame(record == job.readmit.end() ? nullptr : &record->second, generation.number);
        job.readmit[id] = ReadmitRecord{strikes, 0};
        v1::UnresponsiveMember& member = job.unresponsive[id];
        member.Clear();
        member.set_worker_id(id);
        member.set_rank(generation.RankOf(id));
        member.set_generation(generation.number);
        member.set_step(report.step());
        member.set_since(now);
        member.set_unreachable_from(outcome.unreachable_from);
      }
      MirrorUnresponsive(job);
    }
    for (const std::string& id : left_out) keep.erase(std::remove(keep.begin(), keep.end(), id), keep.end());
  }
  NextGeneration(state, job, keep, GenerationStartReason::kFailureReported, cause, /*charge=*/!retry_failed, blamed,
                 now, &changes);
  return changes;
}

// Sets each left-out member's back-off and forgets it once its trainer
// answered and the back-off is over, so the growth rule takes it back.
void EndBackoffs(ClusterState& state, double now, double lease_seconds, ChangeSet* changes) {
  for (JobRecord* job : RunningJobsInSubmitOrder(state)) {
    bool changed = false;
    for (auto it = job->unresponsive.begin(); it != job->unresponsive.end();) {
      v1::UnresponsiveMember& member = it->second;
      if (member.backoff_seconds() <= 0) {
        auto record = job->readmit.find(it->first);
        member.set_backoff_seconds(
            ReadmitBackoffSeconds(record == job->readmit.end() ? 0 : record->second.strikes, lease_seconds));
        changed = true;
      }
      if (member.answered() && now >= member.since() + member.backoff_seconds()) {
        it = job->unresponsive.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
    if (!changed) continue;
    MirrorUnresponsive(*job);
    Touch(*job, now, changes);
  }
}

ChangeSet AdvanceGenerations(ClusterState& state, double now, const GenerationOptions& options) {
  ChangeSet changes;
  EndBackoffs(state, now, options.lease_seconds, &changes);
  for (JobRecord* job : RunningJobsInSubmitOrder(state)) {
    if (job->generation.formed || TryForm(state, *job, "", now, &changes)) continue;
    if (now - job->waiting_since > options.min_workers_wait_seconds) {
      FinishJob(state, *job, v1::FAILED,
                absl::StrCat("fewer than min_workers (", job->info.spec().min_workers(), ") workers for ",
                             options.min_workers_wait_seconds, " seconds"),
                now, &changes);
    }
  }
  for (JobRecord* job : RunningJobsInSubmitOrder(state)) {
    if (job->recovering && job->generation.formed) ResolveRecovery(state, *job, now, &changes);
  }
  changes.Merge(Schedule(state, now));
  // Growing below max_workers comes after every pending job was served, in
  // priority order, and never takes a worker reserved for a waiting job.
  std::vector<JobRecord*> growing = RunningJobsInSubmitOrder(state);
  std::stable_sort(growing.begin(), growing.end(),
                   [](const JobRecord* a, const JobRecord* b) { return ServedBefore(*a, *b); });
  for (JobRecord* job : growing) {
    const Generation& generation = job->generation;
    const v1::JobSpec& spec = job->info.spec();
    if (!generation.formed || job->recovering || !generation.finished.empty()) continue;
    if (!job->release_requested.empty()) continue;  // it is shrinking
    if (static_cast<int64_t>(generation.members.size()) >= spec.max_workers()) continue;
    if (now - generation.started_at < options.lease_seconds) continue;  // rate limit
    // Only idle workers that would join: with islands, one whose island
    // stays short of its minimum would re-form the job into the same members.
    const std::vector<std::string> idle = IdleWorkersFor(state, job->info.id(), spec);
    if (ChooseMembers(state, spec, generation.members, idle, spec.max_workers()).size() <= generation.members.size()) {
      continue;
    }
    // Fencing now would cost the steps since the last commit: the ranks
    // re-form at their next commit point instead (ReformAtBoundary).
    job->reform_requested_generation = generation.number;
  }
  return changes;
}

ChangeSet TrainerAnswered(ClusterState& state, const std::string& job_id, const std::string& worker_id, double now) {
  ChangeSet changes;
  auto it = state.jobs.find(job_id);
  if (it == state.jobs.end()) return changes;
  JobRecord& job = it->second;
  auto entry = job.unresponsive.find(worker_id);
  if (entry == job.unresponsive.end()) return changes;
  v1::UnresponsiveMember& member = entry->second;
  // Past its back-off it may rejoin now; within it (or before upkeep set
  // one) it is marked answered and stays out until AdvanceGenerations ends it.
  if (member.backoff_seconds() > 0 && now >= member.since() + member.backoff_seconds()) {
    ForgetUnresponsive(job, worker_id, now, &changes);
  } else if (!member.answered()) {
    member.set_answered(true);
    MirrorUnresponsive(job);
    Touch(job, now, &changes);
  }
  return changes;
}

void MarkRestarted(ClusterState& state, double now) {
  for (auto& [id, job] : state.jobs) {
    // Members left out as hung stay out (JobRecord::unresponsive): their
    // daemons heartbeat with the hung trainer still running.
    if (job.info.state() != v1::RUNNING) continue;
    if (job.generation.formed) {
      job.recovering = true;
    } else {
      job.waiting_since = now;  // the workers need time to come back first
    }
  }
}

}  // namespace herd::coordinator
