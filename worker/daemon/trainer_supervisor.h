// Keeps one trainer process per assigned job: starts, stops and reaps them,
// and remembers exits until a heartbeat has carried them to the coordinator.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/herd.pb.h"
#include "worker/daemon/trainer_command.h"
#include "worker/daemon/trainer_metrics_collector.h"
#include "worker/daemon/trainer_process.h"
#include "worker/daemon/worker_metrics.h"

namespace herd::worker {

struct SupervisorOptions {
  std::string work_dir;  // each trainer runs in <work_dir>/jobs/<job_id>
  TrainerCommand command;
  std::vector<int> gpus;  // cuda: the indices trainers are spread over
  std::chrono::milliseconds kill_grace{5000};
  // A trainer whose alive file (TrainerAlivePath) is older than this is
  // killed as stuck; 0 turns the check off. Must exceed the longest wait a
  // trainer makes (collective timeout, join timeout).
  std::chrono::milliseconds stuck_after{600000};
};

// What one heartbeat reports. Its success acknowledges the exits it carried.
struct HeartbeatReport {
  std::vector<std::string> running_jobs;
  std::vector<v1::TrainerExit> exits;
  uint64_t last_exit_sequence = 0;  // exits up to this sequence are carried
  // Checkpoint records exited trainers left unacknowledged, taken once (the
  // daemon delivers them before the exits: unrecorded_checkpoints.h).
  v1::CheckpointRecords unrecorded_checkpoints;
};

// Exit code reported when a trainer could not be started at all.
constexpr int kSpawnFailedExitCode = 127;

class TrainerSupervisor {
 public:
  // `metrics` and `trainer_metrics` (if any) must outlive the supervisor.
  TrainerSupervisor(SupervisorOptions options, WorkerMetrics* metrics,
                    TrainerMetricsCollector* trainer_metrics = nullptr);
  ~TrainerSupervisor();

  HeartbeatReport PrepareReport();

  // Call after the heartbeat that carried `report` succeeded: drops the
  // exits it carried, stops trainers whose job is not in `assignments` and
  // starts one for each new assignment. A job whose exit the coordinator has
  // not seen yet is not restarted: its assignment predates the exit.
  void ApplyAssignments(const HeartbeatReport& report, const std::vector<v1::Assignment>& assignments);

  // Reaps trainers that exited, stops trainers stuck past the deadline and
  // escalates stops past their grace to SIGKILL. Non-blocking. Returns how
  // many trainers exited.
  int Poll();

  // Stops every trainer (SIGTERM, SIGKILL after the grace) and reaps them.
  // Blocks for at most about the grace period.
  void StopAll();

  std::vector<std::string> RunningJobs();
  // Whether a trainer of `job_id` runs (or is being stopped) here.
  bool Running(const std::string& job_id);
  // The job's working dir (its trainer's --work-dir; see trainer_contract.h).
  std::string JobDir(const std::string& job_id) const;

  // The coordinator named which ranks of these jobs leave at their next step
  // boundary: writes each one's release-request file (trainer_contract.h)
  // with that set, unless it holds it already.
  void AskToLeave(const std::vector<v1::JobLeavers>& leavers);
  // The coordinator asked these jobs to re-form at their next step boundary
  // (workers wait to join): writes each one's reform-request file with the
  // generation asked, unless it holds that one already.
  void ReformJobs(const std::vector<v1::ReformRequest>& requests);

  // No trainer runs and every exit was reported: a draining daemon may go.
  bool Drained();

 private:
  struct Trainer {
    std::unique_ptr<TrainerProcess> process;
    // The generation it was started for. A trainer lives across generations
    // and writes each one it joins into its alive file; its exit is charged
    // to the newer of the two (JoinedGeneration), never merely to the newest
    // assigned: one killed before it joined a new generation did not fail it.
    int64_t generation = 0;
    std::optional<int> gpu;
    std::string job_dir;
    std::chrono::system_clock::time_point started;
    std::string stuck_message;  // set when the daemon stopped it as stuck
  };
  struct PendingExit {
    uint64_t sequence = 0;
    v1::TrainerExit exit;
  };

  void StartLocked(const v1::Assignment& assignment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopStuckLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static int64_t JoinedGeneration(const Trainer& trainer);
  void RecordExitLocked(const std::string& job_id, int64_t generation, int exit_code, std::string message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<int> PickGpuLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SupervisorOptions options_;
  WorkerMetrics* const metrics_;
  TrainerMetricsCollector* const trainer_metrics_;
  absl::Mutex mu_;
  std::map<std::string, Trainer> trainers_ ABSL_GUARDED_BY(mu_);
  std::deque<PendingExit> pending_exits_ ABSL_GUARDED_BY(mu_);
  uint64_t next_exit_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  v1::CheckpointRecords unrecorded_checkpoints_ ABSL_GUARDED_BY(mu_);
  // Invalid job ids already reported, so each is reported once.
  std::set<std::string> rejected_job_ids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace herd::worker
