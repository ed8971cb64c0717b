#include "coordinator/coordinator.h"

#include <glog/logging.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/spec_enums.h"
#include "common/stored_spec.h"
#include "coordinator/job_settings.h"
#include "coordinator/release.h"
#include "coordinator/validation.h"

namespace herd::coordinator {
namespace {

absl::Status ShuttingDown() { return absl::UnavailableError("coordinator is shutting down"); }

absl::Duration Millis(int64_t ms) { return absl::Milliseconds(std::max<int64_t>(ms, 0)); }

// A trainer's final report rides with its exit, which counts whatever the
// report holds; a malformed report is dropped (and named in the log) rather
// than refusing the heartbeat, which would cost the worker its lease.
v1::HeartbeatRequest WithoutMalformedFinalProgress(const v1::HeartbeatRequest& request) {
  v1::HeartbeatRequest checked = request;
  for (v1::TrainerExit& exit : *checked.mutable_exits()) {
    if (!exit.has_final_progress()) continue;
    if (auto status = ValidateProgressReport(exit.final_progress()); !status.ok()) {
      LOG(WARNING) << "worker " << request.worker_id() << ": the final progress report of job " << exit.job_id()
                   << " is dropped: " << status.message();
      exit.clear_final_progress();
    }
  }
  return checked;
}

// A failed write as the caller sees it: UNAVAILABLE when the store did not
// answer (worth a retry later), INTERNAL otherwise, naming what the store said.
absl::Status NotPersisted(const absl::Status& failure) {
  if (failure.ok()) return absl::OkStatus();
  if (absl::IsUnavailable(failure) || absl::IsDeadlineExceeded(failure)) {
    return absl::UnavailableError(absl::StrCat("state change not persisted: ", failure.message()));
  }
  return absl::InternalError(absl::StrCat("state change not persisted: ", failure.message()));
}

}  // namespace

// Every exclusive section of mu_ goes through it. On entry it folds into the
// state the lease renewals heartbeats recorded meanwhile (so lease expiry,
// like every decision, sees each heartbeat that came before it) and the
// outcomes of finished writes. On exit it releases mu_, then runs the writes
// the section queued, in their turn, and applies their outcomes under mu_
// again before the call returns: the caller sees its own write's trouble (a
// storage warning, or the failure it answers with), while nobody waited on
// the lock for the store.
class Coordinator::StateLock {
 public:
  explicit StateLock(Coordinator* coordinator) ABSL_EXCLUSIVE_LOCK_FUNCTION(coordinator->mu_)
      : coordinator_(coordinator) {
    coordinator_->mu_.Lock();
    ApplyLeaseRenewals(coordinator_->state_, coordinator_->leases_.Take());
    coordinator_->ApplyWriteOutcomes();
  }
  ~StateLock() ABSL_UNLOCK_FUNCTION() {
    std::vector<QueuedWrite> queued;
    queued.swap(coordinator_->queued_);
    std::map<std::string, JobSnapshot> changed;
    changed.swap(coordinator_->watched_changes_);
    coordinator_->mu_.Unlock();
    coordinator_->watchers_.Deliver(changed);
    if (queued.empty()) return;
    for (const QueuedWrite& write : queued) {
      absl::Status failure = coordinator_->WriteInTurn(write);
      if (write.written != nullptr) *write.written = std::move(failure);
    }
    changed.clear();
    {
      absl::MutexLock lock(&coordinator_->mu_);
      coordinator_->ApplyWriteOutcomes();
      changed.swap(coordinator_->watched_changes_);
    }
    coordinator_->watchers_.Deliver(changed);
  }
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

 private:
  Coordinator* const coordinator_;
};

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(const CoordinatorOptions& options,
                                                                 std::unique_ptr<StateStore> store, const Clock* clock,
                                                                 Metrics* metrics) {
  auto state = store->Load(clock->Now());
  if (!state.ok()) return state.status();
  MarkRestarted(*state, clock->Now());
  std::unique_ptr<Coordinator> coordinator(
      new Coordinator(options, std::move(store), clock, metrics, *std::move(state)));
  if (options.run_ticker) coordinator->ticker_ = std::thread([c = coordinator.get()] { c->RunTicker(); });
  return coordinator;
}

Coordinator::Coordinator(const CoordinatorOptions& options, std::unique_ptr<StateStore> store, const Clock* clock,
                         Metrics* metrics, ClusterState state)
    : options_(options),
      store_(std::move(store)),
      clock_(clock),
      metrics_(metrics),
      kv_(options.kv_limits),
      state_(std::move(state)),
      random_(std::random_device{}()) {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, job] : state_.jobs) {
    JoinView view = JoinViewOf(state_, job, nullptr, /*members_changed=*/false);
    board_.Publish(id, view);
    join_views_[id] = std::move(view);
  }
  PublishGauges();
}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::StartServing() {
  StateLock lock(this);
  const double now = clock_->Now();
  state_.serving_since = now;
  for (auto& [id, worker] : state_.workers) {
    if (worker.state != v1::DEAD) worker.last_heartbeat = std::max(worker.last_heartbeat, now + kRestartGraceSeconds);
  }
}

void Coordinator::Shutdown() {
  {
    StateLock lock(this);
    if (shutting_down_) return;
    shutting_down_ = true;
  }
  watchers_.Shutdown(ShuttingDown());
  board_.Shutdown();
  kv_.Shutdown();
  if (ticker_.joinable()) ticker_.join();
  {
    StateLock lock(this);
    FlushUnsavedJobs(clock_->Now(), /*all=*/true);
  }  // written here, and the outcomes applied
  absl::MutexLock lock(&mu_);
  for (const auto& [id, trouble] : write_trouble_) {
    LOG(ERROR) << "job " << id << ": its newest state could not be saved (" << trouble.error
               << "); a restart will show it as saved before " << trouble.since << " (unix time)";
  }
}

bool Coordinator::TickerShouldWake() { return shutting_down_ || upkeep_due_; }

void Coordinator::RunTicker() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(this, &Coordinator::TickerShouldWake), options_.tick_interval);
      if (shutting_down_) return;
      upkeep_due_ = false;
    }
    Tick();
  }
}

void Coordinator::Tick() {
  {
    StateLock lock(this);
    const double now = clock_->Now();
    // Only the ticker keeps a rhythm to measure a pause against; a test that
    // drives Tick by hand moves its clock in jumps on purpose.
    if (options_.run_ticker && GraceAfterPause(state_, last_upkeep_, now, options_.lease_seconds)) {
      LOG(WARNING) << "the coordinator heard nothing for " << now - last_upkeep_
                   << " s (it was stopped or starved): every worker's lease restarts now";
    }
    last_upkeep_ = now;
    GenerationOptions generations;
    generations.lease_seconds = options_.lease_seconds;
    generations.min_workers_wait_seconds = options_.min_workers_wait_seconds;
    ChangeSet changes = ExpireLeases(state_, now, options_.lease_seconds);
    changes.Merge(DropSilentMembersAfterFailure(state_, now, options_.lease_seconds));
    changes.Merge(AdvanceGenerations(state_, now, generations));
    if (!changes.empty()) Commit(changes);  // a failed write is logged, shown and retried (ApplyWriteOutcomes)
    FlushUnsavedJobs(now, /*all=*/false);
  }
  // Gauges walk every worker: with the lock shared, heartbeats go on.
  absl::ReaderMutexLock lock(&mu_);
  PublishGauges();
}

// ---------------------------------------------------------------- changes

void Coordinator::Commit(const ChangeSet& changes, absl::Status* written) {
  queued_.push_back(Prepare(changes));
  queued_.back().written = written;
  Publish(changes);
}

Coordinator::QueuedWrite Coordinator::Prepare(const ChangeSet& changes) {
  const double now = clock_->Now();
  QueuedWrite write;
  write.ticket = turns_.Take();
  write.records = Snapshot(state_, changes);
  write.views = JoinViewsFor(changes);
  // On their way: a change made from now on marks them unsaved again, and
  // a failed write does (ApplyWriteOutcomes).
  for (const std::string& id : changes.jobs) {
    unsaved_jobs_.erase(id);
    progress_saved_at_[id] = now;
  }
  for (const std::string& id : changes.workers) unsaved_workers_.erase(id);
  return write;
}

absl::Status Coordinator::WriteInTurn(const QueuedWrite& write) {
  absl::Status first_failure;
  turns_.RunInTurn(write.ticket, [&] {
    WriteOutcome outcome;
    outcome.at = clock_->Now();
    const StateWrite& records = write.records;
    // Joiners see a change once it is durable, not after the store's
    // follow-up work (or once its write failed, below).
    bool published = false;
    auto publish = [&] {
      for (const auto& [id, view] : write.views) board_.Publish(id, view);
      published = true;
    };
    absl::Status status = records.empty() ? absl::OkStatus() : store_->Write(records, publish);
    if (status.ok()) {
      for (const JobRecord& job : records.jobs) outcome.saved_jobs.push_back(job.info.id());
    } else {
      // One record that cannot be written must not hold back the others.
      auto alone = [&](StateWrite one) { return records.size() == 1 ? status : store_->Write(one); };
      for (const JobRecord& job : records.jobs) {
        absl::Status saved = alone(StateWrite{{job}, {}});
        if (saved.ok()) {
          outcome.saved_jobs.push_back(job.info.id());
        } else {
          outcome.failed_jobs.emplace_back(job.info.id(), saved);
          if (outcome.first_failure.ok()) outcome.first_failure = saved;
        }
      }
      for (const WorkerRecord& worker : records.workers) {
        absl::Status saved = alone(StateWrite{{}, {worker}});
        if (saved.ok()) continue;
        outcome.failed_workers.emplace_back(worker.id, saved);
        if (outcome.first_failure.ok()) outcome.first_failure = saved;
      }
    }
    if (!published) publish();
    first_failure = outcome.first_failure;
    absl::MutexLock lock(&outcomes_mu_);
    outcomes_.push_back(std::move(outcome));
  });
  return first_failure;
}

void Coordinator::ApplyWriteOutcomes() {
  std::vector<WriteOutcome> outcomes;
  {
    absl::MutexLock lock(&outcomes_mu_);
    outcomes.swap(outcomes_);
  }
  for (const WriteOutcome& outcome : outcomes) {
    for (const std::string& id : outcome.saved_jobs) JobSaved(id, outcome.at);
    for (const auto& [id, status] : outcome.failed_jobs) JobWriteFailed(id, status, outcome.at);
    for (const auto& [id, status] : outcome.failed_workers) {
      metrics_->CountStateWriteFailure("worker");
      NoteWriteFailure(worker_trouble_, std::string(status.message()), outcome.at);
      LOG_IF(ERROR, unsaved_workers_.insert(id).second)
          << "worker " << id << ": state not persisted (retrying): " << status;
    }
    if (unsaved_workers_.empty()) worker_trouble_ = WriteTrouble();
    metrics_->SetJobsUnsaved(static_cast<int64_t>(write_trouble_.size()));
  }
}

std::vector<std::pair<std::string, JoinView>> Coordinator::JoinViewsFor(const ChangeSet& changes) {
  // Job id -> whether one of its members' records changed (address, labels).
  std::map<std::string, bool> jobs;
  for (const std::string& id : changes.jobs) jobs.emplace(id, false);
  for (const std::string& id : changes.workers) {
    auto worker = state_.workers.find(id);
    if (worker != state_.workers.end() && !worker->second.job_id.empty()) jobs[worker->second.job_id] = true;
  }
  std::vector<std::pair<std::string, JoinView>> views;
  for (const auto& [id, members_changed] : jobs) {
    auto job = state_.jobs.find(id);
    if (job == state_.jobs.end()) continue;
    auto previous = join_views_.find(id);
    JoinView view = JoinViewOf(state_, job->second, previous == join_views_.end() ? nullptr : &previous->second,
                               members_changed);
    join_views_[id] = view;
    views.emplace_back(id, std::move(view));
  }
  return views;
}

void Coordinator::JobSaved(const std::string& id, double now) {
  auto trouble = write_trouble_.find(id);
  if (trouble == write_trouble_.end()) return;
  LOG(WARNING) << "job " << id << ": state persisted again after " << trouble->second.failures << " failed writes over "
               << now - trouble->second.since << " s";
  write_trouble_.erase(trouble);
  metrics_->SetJobsUnsaved(static_cast<int64_t>(write_trouble_.size()));
  auto job = state_.jobs.find(id);
  if (job == state_.jobs.end()) return;
  job->second.info.clear_storage_warning();
  ++job->second.version;  // watchers see the warning go
  JobChanged(id);
}

void Coordinator::JobWriteFailed(const std::string& id, const absl::Status& status, double now,
                                 const std::string& record) {
  metrics_->CountStateWriteFailure(record);
  unsaved_jobs_.insert(id);  // the ticker retries
  WriteTrouble& trouble = write_trouble_[id];
  const std::string before = trouble.error;
  if (NoteWriteFailure(trouble, std::string(status.message()), now) || trouble.error != before) {
    LOG(ERROR) << "job " << id << ": state not persisted (retrying): " << status;
  }
  auto job = state_.jobs.find(id);
  if (job == state_.jobs.end()) return;
  const std::string warning = StorageWarning(trouble);
  if (job->second.info.storage_warning() == warning) return;
  job->second.info.set_storage_warning(warning);
  ++job->second.version;  // watchers see the warning
  JobChanged(id);
}

void Coordinator::ForgetUnsavedJob(const std::string& id) {
  unsaved_jobs_.erase(id);
  write_trouble_.erase(id);
  progress_saved_at_.erase(id);
  metrics_->SetJobsUnsaved(static_cast<int64_t>(write_trouble_.size()));
}

void Coordinator::JobChanged(const std::string& id) {
  if (!watchers_.Watched(id)) return;
  const JobRecord& job = state_.jobs.at(id);
  watched_changes_[id] = JobSnapshot{job.info, job.version};
}

void Coordinator::Publish(const ChangeSet& changes) {
  for (const std::string& id : changes.jobs) {
    const JobRecord& job = state_.jobs.at(id);
    JobChanged(id);
    // A suspended job's scopes go when it starts its next generation.
    kv_.DropGenerationsBefore(id, IsFinal(job.info.state()) ? INT64_MAX : job.generation.number);
  }
  for (Preemption kind : changes.preemptions) metrics_->CountPreemption(std::string(PreemptionName(kind)));
  for (const StartedGeneration& started : changes.generations_started) {
    metrics_->CountGenerationStarted(std::string(GenerationStartReasonName(started.reason)));
    const JobRecord& job = state_.jobs.at(started.job_id);
    LOG(INFO) << "job " << started.job_id << ": generation " << started.number << " started ("
              << GenerationStartReasonName(started.reason) << ") with " << job.generation.members.size()
              << " workers; the job's committed step is " << job.generation.start_step;
  }
  for (const ReleaseRequested& release : changes.releases_requested) {
    metrics_->CountReleaseRequested(std::string(ReleaseReasonName(release.reason)));
    LOG(INFO) << "job " << release.job_id << ": worker " << release.worker_id << " asked to leave at the next step "
              << "boundary (" << ReleaseReasonName(release.reason) << ")";
  }
  if (!changes.workers.empty()) worker_gauges_stale_ = true;
}

void Coordinator::FlushUnsavedJobs(double now, bool all) {
  ChangeSet due;
  for (const std::string& id : unsaved_jobs_) {
    auto trouble = write_trouble_.find(id);
    const bool is_due = trouble != write_trouble_.end()
                            ? now >= NextWriteAttempt(trouble->second)
                            : now - progress_saved_at_[id] >= options_.progress_persist_seconds;
    if (all || is_due) due.jobs.insert(id);
  }
  if (!unsaved_workers_.empty() && (all || now >= NextWriteAttempt(worker_trouble_))) due.workers = unsaved_workers_;
  if (due.empty()) return;
  queued_.push_back(Prepare(due));  // ApplyWriteOutcomes logs, counts and warns per record
}

void Coordinator::PublishGauges() {
  std::map<v1::JobState, int64_t> jobs_by_state;
  for (const auto& [id, job] : state_.jobs) ++jobs_by_state[job.info.state()];
  metrics_->SetJobCounts(jobs_by_state);
  metrics_->SetKvBytes(static_cast<int64_t>(kv_.TotalBytes()));
  // Walking every worker (10,000 label sets) each tick held the lock for
  // nothing: these change only with a worker's record.
  if (!worker_gauges_stale_.exchange(false)) return;
  int64_t alive = std::count_if(state_.workers.begin(), state_.workers.end(),
                                [](const auto& entry) { return entry.second.state != v1::DEAD; });
  metrics_->SetWorkersAlive(alive);
  std::map<std::string, std::map<std::string, std::string>> labels_by_worker;
  for (const auto& [id, worker] : state_.workers) {
    if (worker.state != v1::DEAD) labels_by_worker[id] = worker.labels;
  }
  metrics_->SetWorkerLabels(labels_by_worker);
}

std::string Coordinator::RandomHex(int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(digits, '0');
  for (char& c : hex) c = kHex[random_() % 16];
  return hex;
}

// ---------------------------------------------------------------- jobs

absl::StatusOr<v1::JobInfo> Coordinator::SubmitJob(v1::JobSpec spec, const std::string& owner) {
  if (auto status = UpgradeStoredSpec(&spec); !status.ok()) return status;  // an older client's strings
  ApplyJobDefaults(&spec);
  if (auto status = ValidateJobSpec(spec); !status.ok()) return status;
  JobRecord job;
  QueuedWrite write;
  {
    StateLock lock(this);
    if (const int64_t cap = options_.max_pending_jobs_per_owner; cap > 0) {
      int64_t pending = std::count_if(state_.jobs.begin(), state_.jobs.end(), [&](const auto& entry) {
        return entry.second.info.state() == v1::PENDING && entry.second.info.owner() == owner;
      });
      pending += std::count_if(submitting_.begin(), submitting_.end(),
                               [&](const auto& entry) { return entry.second == owner; });
      if (pending >= cap) {
        return absl::ResourceExhaustedError(absl::StrCat("'", owner, "' already has ", pending,
                                                         " pending jobs; the limit is ", cap,
                                                         " per user (herd-coordinator --max-pending-jobs-per-user)"));
      }
    }
    std::string id;
    do {
      id = "job-" + RandomHex(8);
    } while (state_.jobs.count(id) || submitting_.count(id));
    // Built aside and written before it joins the state: nothing (the
    // scheduler, a listing) sees a job that a restart would lose, and the
    // write waits on no lock.
    ClusterState aside;
    aside.next_submit_seq = state_.next_submit_seq++;
    ChangeSet changes;
    AddPendingJob(aside, id, spec, clock_->Now(), &changes).info.set_owner(owner);
    job = aside.jobs.at(id);
    submitting_[id] = owner;
    write.ticket = turns_.Take();
    write.records = Snapshot(aside, changes);
  }
  const absl::Status failure = WriteInTurn(write);
  StateLock lock(this);
  const std::string id = job.info.id();
  submitting_.erase(id);
  if (!failure.ok()) {
    ForgetUnsavedJob(id);  // never acknowledge a job a restart would lose
    return NotPersisted(failure);
  }
  progress_saved_at_[id] = clock_->Now();
  state_.jobs[id] = std::move(job);
  ChangeSet changes;
  changes.jobs.insert(id);
  Publish(changes);
  JoinView view = JoinViewOf(state_, state_.jobs.at(id), nullptr, /*members_changed=*/false);
  join_views_[id] = view;
  board_.Publish(id, std::move(view));
  upkeep_due_ = true;  // the ticker schedules it now, not at its next tick
  const v1::JobSpec& stored = state_.jobs.at(id).info.spec();
  LOG(INFO) << "job " << id << " submitted by '" << owner << "' (" << stored.name() << ", " << stored.min_workers()
            << "-" << stored.max_workers() << " " << SpecName(stored.device()) << " workers)";
  return state_.jobs.at(id).info;
}

absl::StatusOr<v1::JobInfo> Coordinator::GetJob(const std::string& id) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = state_.jobs.find(id);
  if (it == state_.jobs.end()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  return it->second.info;
}

std::vector<v1::JobInfo> Coordinator::ListJobs() {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<const JobRecord*> jobs;
  for (const auto& [id, job] : state_.jobs) jobs.push_back(&job);
  std::sort(jobs.begin(), jobs.end(),
            [](const JobRecord* a, const JobRecord* b) { return a->submit_seq > b->submit_seq; });
  std::vector<v1::JobInfo> infos;
  infos.reserve(jobs.size());
  for (const JobRecord* job : jobs) infos.push_back(job->info);
  return infos;
}

// The user's calls below change the state under mu_ and answer once their
// write is durable, written after mu_ is released (see Commit). Jobs and
// workers are never removed from the state, so the answer is read then.

absl::StatusOr<v1::JobInfo> Coordinator::CancelJob(const std::string& id) {
  absl::Status written;
  {
    StateLock lock(this);
    auto changes = herd::coordinator::CancelJob(state_, id, clock_->Now());
    if (!changes.ok()) return changes.status();
    Commit(*changes, &written);
  }
  if (!written.ok()) return NotPersisted(written);
  LOG(INFO) << "job " << id << " cancelled";
  return GetJob(id);
}

absl::StatusOr<v1::JobInfo> Coordinator::ResizeJob(const std::string& id, int64_t min_workers, int64_t max_workers) {
  absl::Status written;
  v1::JobSpec resized;
  {
    StateLock lock(this);
    auto changes = herd::coordinator::ResizeJob(state_, id, min_workers, max_workers, clock_->Now());
    if (!changes.ok()) return changes.status();
    resized = state_.jobs.at(id).info.spec();
    Commit(*changes, &written);
  }
  if (!written.ok()) return NotPersisted(written);
  LOG(INFO) << "job " << id << " resized to " << resized.min_workers() << "-" << resized.max_workers() << " workers";
  return GetJob(id);
}

absl::StatusOr<v1::JobInfo> Coordinator::SetJobPriority(const std::string& id, int64_t priority) {
  absl::Status written;
  {
    StateLock lock(this);
    auto changes = herd::coordinator::SetJobPriority(state_, id, priority, clock_->Now());
    if (!changes.ok()) return changes.status();
    Commit(*changes, &written);
  }
  if (!written.ok()) return NotPersisted(written);
  LOG(INFO) << "job " << id << " priority set to " << priority;
  return GetJob(id);
}

absl::StatusOr<JobWatchers::WatchId> Coordinator::WatchJob(const std::string& id,
                                                           std::shared_ptr<JobWatcher> watcher) {
  JobSnapshot now;
  JobWatchers::WatchId watch;
  {
    // Changes are recorded under mu_ held exclusively: none falls between
    // this snapshot and the registration.
    absl::ReaderMutexLock lock(&mu_);
    if (shutting_down_) return ShuttingDown();
    auto it = state_.jobs.find(id);
    if (it == state_.jobs.end()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
    watch = watchers_.Add(id, watcher);
    if (watch == 0) return ShuttingDown();
    now = JobSnapshot{it->second.info, it->second.version};
  }
  watcher->Changed(now);
  return watch;
}

void Coordinator::StopWatching(JobWatchers::WatchId id) { watchers_.Remove(id); }

std::vector<v1::WorkerInfo> Coordinator::ListWorkers() {
  StateLock lock(this);
  std::vector<v1::WorkerInfo> workers;
  for (const auto& [id, worker] : state_.workers) workers.push_back(worker.ToInfo());
  return workers;
}

absl::StatusOr<std::vector<v1::CheckpointInfo>> Coordinator::ListCheckpoints(const std::string& job_id) {
  absl::ReaderMutexLock lock(&mu_);
  if (!state_.jobs.count(job_id)) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  auto it = state_.checkpoints.find(job_id);
  if (it == state_.checkpoints.end()) return std::vector<v1::CheckpointInfo>{};
  return std::vector<v1::CheckpointInfo>(it->second.rbegin(), it->second.rend());  // newest first
}

absl::StatusOr<v1::WorkerInfo> Coordinator::CordonWorker(const std::string& worker_id, bool cordoned) {
  absl::Status written;
  {
    StateLock lock(this);
    auto changes = SetCordoned(state_, worker_id, cordoned);
    if (!changes.ok()) return changes.status();
    Commit(*changes, &written);
  }
  if (!written.ok()) return NotPersisted(written);
  LOG(INFO) << "worker " << worker_id << (cordoned ? " cordoned" : " uncordoned");
  absl::ReaderMutexLock lock(&mu_);
  return state_.workers.at(worker_id).ToInfo();
}

absl::StatusOr<v1::DrainWorkerResponse> Coordinator::DrainWorker(const std::string& worker_id) {
  absl::Status written;
  std::vector<std::string> released;
  {
    StateLock lock(this);
    auto changes = herd::coordinator::DrainWorker(state_, worker_id, clock_->Now(), &released);
    if (!changes.ok()) return changes.status();
    Commit(*changes, &written);
  }
  if (!written.ok()) return NotPersisted(written);
  LOG(INFO) << "worker " << worker_id << " draining: cordoned, " << released.size()
            << " job(s) asked to release it at their next step boundary";
  v1::DrainWorkerResponse response;
  for (const std::string& job_id : released) response.add_released_jobs(job_id);
  absl::ReaderMutexLock lock(&mu_);
  *response.mutable_worker() = state_.workers.at(worker_id).ToInfo();
  return response;
}

// ---------------------------------------------------------------- workers

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(const v1::RegisterWorkerRequest& request,
                                                                       const std::string& incarnation) {
  if (auto status = ValidateRegistration(request); !status.ok()) return status;
  if (auto status = ValidateIncarnation(incarnation); !status.ok()) return status;
  StateLock lock(this);
  if (IsRestartedWorker(state_, request.worker_id(), incarnation)) {
    LOG(INFO) << "worker " << request.worker_id() << " restarted (incarnation "
              << state_.workers.at(request.worker_id()).incarnation << " -> " << incarnation
              << "): its trainers ended with the old daemon";
  }
  ChangeSet changes = ApplyRegistration(state_, request, incarnation, clock_->Now());
  // Workers' calls go on when a write fails: the change holds in memory, and
  // Persist retries it and shows it; failing the call would stall training too.
  Commit(changes);
  const WorkerRecord& worker = state_.workers.at(request.worker_id());
  LOG(INFO) << "worker " << worker.id << " registered (" << worker.address << ", " << worker.device_count << " "
            << worker.device_kind << ", " << v1::WorkerState_Name(worker.state) << ")";
  v1::RegisterWorkerResponse response;
  response.set_lease_seconds(options_.lease_seconds);
  response.set_heartbeat_interval_seconds(HeartbeatInterval(options_.lease_seconds));
  return response;
}

v1::HeartbeatResponse Coordinator::HeartbeatAnswer(const std::string& worker_id) {
  v1::HeartbeatResponse response;
  for (v1::Assignment& assignment : AssignmentsFor(state_, worker_id)) {
    *response.add_assignments() = std::move(assignment);
  }
  for (v1::JobLeavers& leavers : LeaversFor(state_, worker_id)) *response.add_leavers() = std::move(leavers);
  for (v1::ReformRequest& reform : ReformJobsFor(state_, worker_id)) *response.add_reform_jobs() = std::move(reform);
  return response;
}

std::optional<v1::HeartbeatResponse> Coordinator::RenewLease(const v1::HeartbeatRequest& request) {
  // Most heartbeats only say "alive": they share the lock, renew the lease
  // in the lease table, and wait for no other heartbeat nor any write.
  absl::ReaderMutexLock lock(&mu_);
  auto it = state_.workers.find(request.worker_id());
  if (it == state_.workers.end() || it->second.state == v1::DEAD) {
    metrics_->CountHeartbeat();
    v1::HeartbeatResponse response;
    response.set_reregister(true);
    return response;
  }
  if (!OnlyRenewsLease(state_, request)) return std::nullopt;
  metrics_->CountHeartbeat();
  leases_.Renew(request.worker_id(), clock_->Now());
  return HeartbeatAnswer(request.worker_id());
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(const v1::HeartbeatRequest& request) {
  if (std::optional<v1::HeartbeatResponse> renewed = RenewLease(request)) return *std::move(renewed);
  metrics_->CountHeartbeat();
  StateLock lock(this);
  auto it = state_.workers.find(request.worker_id());
  if (it == state_.workers.end() || it->second.state == v1::DEAD) {
    v1::HeartbeatResponse response;
    response.set_reregister(true);
    return response;
  }
  ChangeSet changes = ApplyHeartbeat(state_, WithoutMalformedFinalProgress(request), clock_->Now());
  if (!changes.empty()) Commit(changes);  // see RegisterWorker
  return HeartbeatAnswer(request.worker_id());
}

absl::StatusOr<v1::JoinGenerationResponse> Coordinator::JoinGeneration(const v1::JoinGenerationRequest& request,
                                                                       const CancelledFn& cancelled) {
  absl::StatusOr<JoinAnswer> answer = AwaitAnswer<JoinAnswer>(
      [&](JoinBoard::Done done) { return StartJoinGeneration(request, std::move(done)); },
      [this](JoinBoard::WaitId id) { CancelJoin(id); }, options_.cancel_poll, cancelled);
  if (!answer.ok()) return answer.status();
  return answer->Message();
}

JoinBoard::WaitId Coordinator::StartJoinGeneration(const v1::JoinGenerationRequest& request, JoinBoard::Done done) {
  const double started = clock_->Now();
  if (JoinChangesState(request)) {
    // Written, and on the join board, before the wait below.
    absl::Status refused;
    {
      StateLock lock(this);
      if (request.at_boundary()) {
        // The ranks left `after_generation` together at a commit they all hold:
        // the next one starts now (the first of them to ask starts it).
        auto changes = ReformAtBoundary(state_, request.job_id(), request.worker_id(), request.after_generation(),
                                        clock_->Now());
        if (changes.ok() && !changes->empty()) Commit(*changes);  // see RegisterWorker
        refused = changes.status();
      }
      // Only a trainer of that worker calls this: one left out as unresponsive answers.
      if (refused.ok()) {
        if (ChangeSet answered = TrainerAnswered(state_, request.job_id(), request.worker_id(), clock_->Now());
            !answered.empty()) {
          Commit(answered);  // see RegisterWorker
        }
      }
    }
    if (!refused.ok()) {
      done(std::move(refused));
      return 0;
    }
  }
  // The wait and the answer need no state lock, and no thread: the join
  // board has the generation's answer, built once for all its ranks, and
  // calls `done` when it is there.
  JoinBoard::JoinWait wait{request.job_id(), request.worker_id(), request.after_generation(),
                           std::min(Millis(request.wait_ms()), options_.max_join_wait), request.wait_ms()};
  return board_.Wait(std::move(wait), [this, started, done = std::move(done)](
                                          absl::StatusOr<JoinAnswer> response) mutable {
    if (response.ok()) metrics_->ObserveRendezvousSeconds(std::max(0.0, clock_->Now() - started));
    done(std::move(response));
  });
}

bool Coordinator::JoinChangesState(const v1::JoinGenerationRequest& request) {
  if (request.at_boundary()) return true;
  absl::ReaderMutexLock lock(&mu_);
  auto job = state_.jobs.find(request.job_id());
  return job != state_.jobs.end() && job->second.unresponsive.count(request.worker_id()) > 0;
}

void Coordinator::CancelJoin(JoinBoard::WaitId id) { board_.Cancel(id); }

bool Coordinator::AwaitWaitingJoins(size_t count, absl::Duration timeout) {
  return board_.AwaitWaiting(count, timeout);
}

absl::Status Coordinator::CheckGeneration(const std::string& job_id, int64_t generation) {
  absl::ReaderMutexLock lock(&mu_);
  return CheckCurrentGeneration(state_, job_id, generation);
}

absl::StatusOr<std::vector<std::string>> Coordinator::GenerationMembers(const std::string& job_id,
                                                                        int64_t generation) {
  absl::ReaderMutexLock lock(&mu_);
  if (auto status = CheckCurrentGeneration(state_, job_id, generation); !status.ok()) return status;
  return state_.jobs.at(job_id).generation.members;
}

absl::Status Coordinator::KvSet(const v1::KvSetRequest& request) {
  if (auto status = CheckGeneration(request.job_id(), request.generation()); !status.ok()) return status;
  return kv_.Set(request.job_id(), request.generation(), request.key(), request.value());
}

absl::StatusOr<std::string> Coordinator::KvGet(const v1::KvGetRequest& request, const CancelledFn& cancelled) {
  return AwaitAnswer<std::string>([&](KvStore::GetDone done) { return StartKvGet(request, std::move(done)); },
                                  [this](KvStore::WaitId id) { CancelKvGet(id); }, options_.kv_limits.cancel_poll,
                                  cancelled);
}

KvStore::WaitId Coordinator::StartKvGet(const v1::KvGetRequest& request, KvStore::GetDone done) {
  if (auto status = CheckGeneration(request.job_id(), request.generation()); !status.ok()) {
    done(std::move(status));
    return 0;
  }
  // The wait happens outside mu_, and holds no thread.
  return kv_.StartGet(request.job_id(), request.generation(), request.key(), Millis(request.wait_ms()),
                      std::move(done));
}

void Coordinator::CancelKvGet(KvStore::WaitId id) { kv_.CancelGet(id); }

bool Coordinator::AwaitWaitingKvGets(size_t count, absl::Duration timeout) {
  return kv_.AwaitWaiting(count, timeout);
}

absl::StatusOr<int64_t> Coordinator::KvAdd(const v1::KvAddRequest& request) {
  if (auto status = CheckGeneration(request.job_id(), request.generation()); !status.ok()) return status;
  return kv_.Add(request.job_id(), request.generation(), request.key(), request.delta());
}

absl::StatusOr<v1::ReportProgressResponse> Coordinator::ReportProgress(const v1::ReportProgressRequest& request) {
  if (auto status = ValidateProgressReport(request); !status.ok()) return status;
  StateLock lock(this);
  if (auto status = CheckCurrentGeneration(state_, request.job_id(), request.generation()); !status.ok()) {
    return status;
  }
  const auto world_size = static_cast<int64_t>(state_.jobs.at(request.job_id()).generation.members.size());
  if (auto status = ValidateRanksInWorld(request, world_size); !status.ok()) return status;
  const double now = clock_->Now();
  ChangeSet changes;
  v1::ReportProgressResponse response;
  response.set_cancelled(ApplyProgress(state_, request, now, &changes));
  if (changes.empty()) return response;
  Publish(changes);
  // Throttled: what is not written now is written by the ticker when due.
  unsaved_jobs_.insert(request.job_id());
  FlushUnsavedJobs(now, /*all=*/false);
  return response;
}

absl::StatusOr<v1::CommitCheckpointResponse> Coordinator::CommitCheckpoint(const v1::CommitCheckpointRequest& request) {
  if (auto status = ValidateCheckpointPath(request.path()); !status.ok()) return status;
  if (auto status = ValidateCheckpointRecord(request); !status.ok()) return status;
  const std::string& job_id = request.job_id();
  v1::CheckpointInfo checkpoint;
  // The job's catalog once this record is written, and what it drops.
  std::vector<v1::CheckpointInfo> catalog, dropped;
  int64_t ticket = 0;
  {
    StateLock lock(this);
    // One record of a job at a time: each is checked against, and changes,
    // the catalog the one before it left (a record delivered again finds
    // itself listed below).
    struct Recording {
      const std::set<std::string>* jobs;
      const std::string* job_id;
    } recording{&recording_checkpoint_, &job_id};
    mu_.Await(absl::Condition(
        +[](Recording* r) { return r->jobs->count(*r->job_id) == 0; }, &recording));
    if (const v1::CheckpointInfo* listed = herd::coordinator::ListedCheckpoint(state_, request)) {
      v1::CommitCheckpointResponse response;
      *response.mutable_checkpoint() = *listed;
      return response;
    }
    if (auto status = CheckCurrentGeneration(state_, job_id, request.generation()); !status.ok()) return status;
    ClusterState aside;  // the catalog lists only what a restart would list: changed once written
    auto listed = state_.checkpoints.find(job_id);
    if (listed != state_.checkpoints.end()) aside.checkpoints[job_id] = listed->second;
    do {
      checkpoint.set_id(absl::StrCat("ckpt-", request.step(), "-", RandomHex(6)));
    } while (std::any_of(aside.checkpoints[job_id].begin(), aside.checkpoints[job_id].end(),
                         [&](const v1::CheckpointInfo& other) { return other.id() == checkpoint.id(); }));
    checkpoint.set_job_id(job_id);
    checkpoint.set_step(request.step());
    checkpoint.set_epoch(request.epoch());
    checkpoint.set_samples_in_epoch(request.samples_in_epoch());
    checkpoint.set_generation(request.generation());
    checkpoint.set_path(request.path());
    checkpoint.set_size_bytes(request.size_bytes());
    checkpoint.set_sha256(request.sha256());
    checkpoint.set_created_unix(clock_->Now());
    const int64_t keep = state_.jobs.at(job_id).info.spec().checkpoint().keep();
    dropped = RecordCheckpoint(aside, checkpoint, keep);
    catalog = std::move(aside.checkpoints[job_id]);
    recording_checkpoint_.insert(job_id);
    ticket = turns_.Take();  // taken last: every ticket taken must run
  }
  // After every earlier change's write, before any later one's.
  absl::Status saved;
  turns_.RunInTurn(ticket, [&] { saved = store_->SaveCheckpoint(checkpoint, dropped); });
  StateLock lock(this);
  recording_checkpoint_.erase(job_id);
  if (!saved.ok()) {
    // Shown on the job until its row is written again (the ticker retries
    // it); the trainer retries the record itself.
    JobWriteFailed(job_id, saved, clock_->Now(), "checkpoint");
    return absl::InternalError(absl::StrCat("checkpoint not recorded: ", saved.message()));
  }
  state_.checkpoints[job_id] = std::move(catalog);
  metrics_->CountCheckpointRecorded();
  // Joiners from now on resume from it: its view goes to the join board in
  // a turn of its own, so no view computed before it lands after it.
  ChangeSet changes;
  changes.jobs.insert(job_id);
  QueuedWrite views;
  views.ticket = turns_.Take();
  views.views = JoinViewsFor(changes);
  queued_.push_back(std::move(views));
  LOG(INFO) << "job " << job_id << ": checkpoint " << checkpoint.id() << " at step " << request.step() << " recorded ("
            << request.path() << ")";
  v1::CommitCheckpointResponse response;
  *response.mutable_checkpoint() = checkpoint;
  for (const v1::CheckpointInfo& old : dropped) {
    // A path written again is the new entry's folder now: it stays.
    if (old.path() != checkpoint.path()) response.add_delete_paths(old.path());
  }
  return response;
}

std::optional<v1::CheckpointInfo> Coordinator::ListedCheckpoint(const v1::CommitCheckpointRequest& request) {
  absl::ReaderMutexLock lock(&mu_);
  if (const v1::CheckpointInfo* listed = herd::coordinator::ListedCheckpoint(state_, request)) return *listed;
  return std::nullopt;
}

absl::Status Coordinator::ReportFailure(const v1::ReportFailureRequest& request) {
  StateLock lock(this);
  auto changes = ApplyFailureReport(state_, request, clock_->Now());
  if (!changes.ok()) return changes.status();
  if (changes->empty()) return absl::OkStatus();
  LOG(WARNING) << "job " << request.job_id() << ": rank " << request.rank() << " (" << request.worker_id()
               << ") reported a failure in generation " << request.generation() << ": " << request.message();
  Commit(*changes);  // see RegisterWorker
  return absl::OkStatus();
}

}  // namespace herd::coordinator
