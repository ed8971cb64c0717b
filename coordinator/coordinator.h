// The coordinator: owns the cluster state behind a reader/writer mutex, and
// its durable copy in a StateStore. Nothing slow happens under that mutex
// held exclusively: store writes run after it is released, in the order of
// the changes (write_turns.h), and a user's call (submit, cancel, resize,
// priority, cordon, drain) or a checkpoint record answers once its own write
// is durable, holding no lock meanwhile; heartbeats that only say "alive"
// hold it shared and renew their lease in a table of their own (lease_table.h);
// JoinGeneration waits and is answered from the join board (join_board.h),
// and the rendezvous KV store has its own lock. The gRPC services call these
// methods; a background ticker expires leases and schedules pending jobs.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/cluster_state.h"
#include "coordinator/generations.h"
#include "coordinator/job_watchers.h"
#include "coordinator/join_board.h"
#include "coordinator/kv_store.h"
#include "coordinator/lease_table.h"
#include "coordinator/metrics.h"
#include "coordinator/state_store.h"
#include "coordinator/write_trouble.h"
#include "coordinator/write_turns.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

struct CoordinatorOptions {
  // A worker silent this long is dead; also the least time between a job's
  // generation start and a join generation.
  double lease_seconds = 10;
  // A job with fewer than min_workers available waits this long, then fails.
  double min_workers_wait_seconds = 60;
  absl::Duration tick_interval = absl::Milliseconds(200);
  // Progress reports are frequent; they reach the database at most this often
  // per job (state changes are always written at once).
  double progress_persist_seconds = 1.0;
  // Longest JoinGeneration wait a worker may ask for.
  absl::Duration max_join_wait = absl::Seconds(120);
  // How often long waits check whether their caller went away.
  absl::Duration cancel_poll = absl::Milliseconds(250);
  // Tests turn the ticker off and call Tick() themselves.
  bool run_ticker = true;
  KvLimits kv_limits;
  // Jobs one owner may have PENDING at once (0: no cap); one more is
  // RESOURCE_EXHAUSTED.
  int64_t max_pending_jobs_per_owner = 100;
};

// Returns true once the RPC's caller has gone (cancelled or past deadline).
using CancelledFn = std::function<bool()>;

class Coordinator {
 public:
  // Loads everything `store` holds (RUNNING jobs then recover, see
  // MarkRestarted) and, if enabled, starts the ticker.
  // `clock` and `metrics` must outlive the coordinator.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(const CoordinatorOptions& options,
                                                             std::unique_ptr<StateStore> store, const Clock* clock,
                                                             Metrics* metrics);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;

  // Call once the RPC server accepts calls: workers loaded from the store
  // get kRestartGraceSeconds on top of a full lease from now. Neither the
  // coordinator's own start-up nor the clients' reconnect backoff (gRPC's,
  // seconds after an outage) should count as a member's silence. The grace
  // only keeps them from being marked DEAD: after a reported failure, a
  // member not heard within ReconnectWindow of now is left out
  // (DropSilentMembersAfterFailure), so the survivors train on within
  // seconds, and a job whose members all re-register re-forms at once.
  void StartServing();
  static constexpr double kRestartGraceSeconds = 15;
  Coordinator& operator=(const Coordinator&) = delete;

  // ---- jobs (JobService)
  // `owner`: the submitting principal, recorded with the job.
  absl::StatusOr<v1::JobInfo> SubmitJob(v1::JobSpec spec, const std::string& owner = "");
  absl::StatusOr<v1::JobInfo> GetJob(const std::string& id);
  std::vector<v1::JobInfo> ListJobs();  // newest first
  absl::StatusOr<v1::JobInfo> CancelJob(const std::string& id);
  // herd resize / herd priority (coordinator/job_settings.h).
  absl::StatusOr<v1::JobInfo> ResizeJob(const std::string& id, int64_t min_workers, int64_t max_workers);
  absl::StatusOr<v1::JobInfo> SetJobPriority(const std::string& id, int64_t priority);
  // WatchJob's wait, without a thread: `watcher` gets the job now, then each
  // change, delivered after the state lock is released. NOT_FOUND for an
  // unknown job, UNAVAILABLE once shutting down (Shutdown ends the watchers
  // so). StopWatching when the watcher goes.
  absl::StatusOr<JobWatchers::WatchId> WatchJob(const std::string& id, std::shared_ptr<JobWatcher> watcher);
  void StopWatching(JobWatchers::WatchId id);
  // True once exactly `count` watchers are registered; false after
  // `timeout` (tests).
  bool AwaitJobWatchers(size_t count, absl::Duration timeout) { return watchers_.AwaitCount(count, timeout); }
  std::vector<v1::WorkerInfo> ListWorkers();
  absl::StatusOr<std::vector<v1::CheckpointInfo>> ListCheckpoints(const std::string& job_id);
  // herd cordon / uncordon and herd drain (release.h). NOT_FOUND for an
  // unknown worker.
  absl::StatusOr<v1::WorkerInfo> CordonWorker(const std::string& worker_id, bool cordoned);
  absl::StatusOr<v1::DrainWorkerResponse> DrainWorker(const std::string& worker_id);

  // ---- workers (ClusterService)
  // `incarnation`: the daemon process's (common/incarnation.h), "" if unknown.
  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(const v1::RegisterWorkerRequest& request,
                                                            const std::string& incarnation = "");
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);
  // Heartbeat's answer when it only renews the lease (or its worker must
  // re-register): under the shared lock, never waiting for a write.
  // nullopt when it changes state: then Heartbeat, which may wait for the
  // state lock and the change's write.
  std::optional<v1::HeartbeatResponse> RenewLease(const v1::HeartbeatRequest& request);
  // JoinGeneration: its state changes (a boundary's re-form, an
  // unresponsive member answering) now, then a wait on the join board that
  // holds no thread. `done` gets the answer exactly once, perhaps before
  // this returns. The id is for CancelJoin (0: answered already).
  JoinBoard::WaitId StartJoinGeneration(const v1::JoinGenerationRequest& request, JoinBoard::Done done);
  // Whether StartJoinGeneration changes state before it waits (and so may
  // wait for the state lock and the change's write).
  bool JoinChangesState(const v1::JoinGenerationRequest& request);
  // Answers a waiting StartJoinGeneration CANCELLED (its caller went).
  void CancelJoin(JoinBoard::WaitId id);
  // StartJoinGeneration, blocking the calling thread (in-process callers and
  // tests): `cancelled` is asked every options.cancel_poll.
  absl::StatusOr<v1::JoinGenerationResponse> JoinGeneration(const v1::JoinGenerationRequest& request,
                                                            const CancelledFn& cancelled);
  // True once exactly `count` joins wait on the join board; false after
  // `timeout` (tests).
  bool AwaitWaitingJoins(size_t count, absl::Duration timeout);
  absl::Status KvSet(const v1::KvSetRequest& request);
  // KvGet's wait holds no thread (see KvStore::StartGet); CancelKvGet and
  // the blocking KvGet as for JoinGeneration.
  KvStore::WaitId StartKvGet(const v1::KvGetRequest& request, KvStore::GetDone done);
  void CancelKvGet(KvStore::WaitId id);
  absl::StatusOr<std::string> KvGet(const v1::KvGetRequest& request, const CancelledFn& cancelled);
  // True once exactly `count` KvGets wait; false after `timeout` (tests).
  bool AwaitWaitingKvGets(size_t count, absl::Duration timeout);
  absl::StatusOr<int64_t> KvAdd(const v1::KvAddRequest& request);
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(const v1::ReportProgressRequest& request);
  absl::StatusOr<v1::CommitCheckpointResponse> CommitCheckpoint(const v1::CommitCheckpointRequest& request);
  // The catalog's entry for this very checkpoint, if listed (ListedCheckpoint
  // in cluster_state.h): answered before fencing, so a record delivered again
  // after its generation ended is never taken for a refused one.
  std::optional<v1::CheckpointInfo> ListedCheckpoint(const v1::CommitCheckpointRequest& request);
  absl::Status ReportFailure(const v1::ReportFailureRequest& request);
  // The members (by rank) of the job's current, formed generation; the
  // fencing errors of CheckCurrentGeneration otherwise. For authorization.
  absl::StatusOr<std::vector<std::string>> GenerationMembers(const std::string& job_id, int64_t generation);

  // One ticker round: expire leases, form, re-form and start generations,
  // flush due progress, refresh gauges.
  void Tick();

  // Wakes every waiting call with UNAVAILABLE, stops the ticker and writes
  // unsaved progress. Idempotent.
  void Shutdown();

 private:
  Coordinator(const CoordinatorOptions& options, std::unique_ptr<StateStore> store, const Clock* clock,
              Metrics* metrics, ClusterState state);
  void RunTicker();
  bool TickerShouldWake() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The assignments, leavers and re-form requests a heartbeat answers with.
  v1::HeartbeatResponse HeartbeatAnswer(const std::string& worker_id) ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Holds mu_ exclusively; see the class comment in coordinator.cc.
  class StateLock;

  // A change's records and join views, written after mu_ is released.
  struct QueuedWrite {
    int64_t ticket = 0;
    StateWrite records;  // none: only the views are published, in turn
    std::vector<std::pair<std::string, JoinView>> views;
    // The caller's, set once the write ran: its first failure, OK once durable.
    absl::Status* written = nullptr;
  };
  // What one QueuedWrite's records came to: applied under mu_, in order.
  struct WriteOutcome {
    double at = 0;
    std::vector<std::string> saved_jobs;
    std::vector<std::pair<std::string, absl::Status>> failed_jobs;
    std::vector<std::pair<std::string, absl::Status>> failed_workers;
    absl::Status first_failure;
  };

  // Publish()es the change now and queues its write: the StateLock writes
  // it once mu_ is released, in one transaction; when that fails, each
  // record in its own, so one record that cannot be written never holds
  // back the others. A record that failed stays unsaved: the ticker retries
  // it, and a job's failure shows as its storage_warning until it is saved
  // (workers' calls and upkeep go on). A user's call passes `written` and
  // answers with it once its StateLock is gone: never before the write is
  // durable, and without holding mu_ while the store works.
  void Commit(const ChangeSet& changes, absl::Status* written = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The write of `changes`, with a ticket; its records count as on their way.
  QueuedWrite Prepare(const ChangeSet& changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs in the write's turn, without mu_: writes, then publishes its join
  // views; the outcome goes to outcomes_.
  // Returns the first record's failure (OK when all were written).
  absl::Status WriteInTurn(const QueuedWrite& write) ABSL_LOCKS_EXCLUDED(outcomes_mu_);
  // Applies the outcomes of finished writes, oldest first.
  void ApplyWriteOutcomes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The join views of the jobs `changes` touched (members' jobs included).
  std::vector<std::pair<std::string, JoinView>> JoinViewsFor(const ChangeSet& changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JobSaved(const std::string& id, double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `record`: what failed to be written (job, checkpoint), for the metric.
  void JobWriteFailed(const std::string& id, const absl::Status& status, double now,
                      const std::string& record = "job") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops every trace of a job that was never acknowledged.
  void ForgetUnsavedJob(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A job's version moved: records the snapshot for its watchers, if any
  // (delivered by the StateLock once mu_ is free).
  void JobChanged(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // In-memory effects of a change: fence old KV scopes, count generations,
  // wake watchers.
  void Publish(const ChangeSet& changes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the write of jobs and workers whose latest record is not on disk
  // yet (throttled progress, failed writes): all of them, or only those due.
  void FlushUnsavedJobs(double now, bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishGauges() ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status CheckGeneration(const std::string& job_id, int64_t generation) ABSL_LOCKS_EXCLUDED(mu_);
  std::string RandomHex(int digits) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  const std::unique_ptr<StateStore> store_;
  const Clock* const clock_;
  Metrics* const metrics_;
  KvStore kv_;

  LeaseTable leases_;
  JoinBoard board_{static_cast<int>(std::max(2u, std::thread::hardware_concurrency()))};
  WriteTurns turns_;

  absl::Mutex mu_;
  JobWatchers watchers_;
  // Watched jobs changed since the last delivery: their newest snapshot.
  std::map<std::string, JobSnapshot> watched_changes_ ABSL_GUARDED_BY(mu_);
  ClusterState state_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> progress_saved_at_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> unsaved_jobs_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> unsaved_workers_ ABSL_GUARDED_BY(mu_);
  WriteTrouble worker_trouble_ ABSL_GUARDED_BY(mu_);  // while unsaved_workers_ is not empty
  // Jobs whose last write failed, by id (see write_trouble.h).
  std::map<std::string, WriteTrouble> write_trouble_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 random_ ABSL_GUARDED_BY(mu_);
  // Written by Commit, taken by the StateLock as it releases mu_.
  std::vector<QueuedWrite> queued_ ABSL_GUARDED_BY(mu_);
  // The latest join view computed per job (reused while its generation stays).
  std::map<std::string, JoinView> join_views_ ABSL_GUARDED_BY(mu_);
  absl::Mutex outcomes_mu_;
  std::vector<WriteOutcome> outcomes_ ABSL_GUARDED_BY(outcomes_mu_);
  // Submitted jobs whose record is being written (id -> owner): not in the
  // state until it is.
  std::map<std::string, std::string> submitting_ ABSL_GUARDED_BY(mu_);
  // Jobs whose checkpoint record is being written: the catalog lists it once
  // it is, and the job's next record waits until then.
  std::set<std::string> recording_checkpoint_ ABSL_GUARDED_BY(mu_);
  // A worker's record changed since the worker gauges were last set.
  std::atomic<bool> worker_gauges_stale_{true};
  // The ticker runs upkeep at once (a job was submitted), not at its next tick.
  bool upkeep_due_ ABSL_GUARDED_BY(mu_) = false;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Clock time of the last upkeep round (Tick), to detect our own pauses.
  double last_upkeep_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread ticker_;
};

}  // namespace herd::coordinator
