#include "worker/daemon/trainer_supervisor.h"

#include <glog/logging.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/contract/generation_outcome.h"
#include "worker/daemon/exit_message.h"
#include "worker/daemon/identifiers.h"

namespace herd::worker {

TrainerSupervisor::TrainerSupervisor(SupervisorOptions options, WorkerMetrics* metrics,
                                     TrainerMetricsCollector* trainer_metrics)
    : options_(std::move(options)), metrics_(metrics), trainer_metrics_(trainer_metrics) {}

TrainerSupervisor::~TrainerSupervisor() { StopAll(); }

HeartbeatReport TrainerSupervisor::PrepareReport() {
  absl::MutexLock lock(&mu_);
  HeartbeatReport report;
  for (const auto& [job_id, trainer] : trainers_) report.running_jobs.push_back(job_id);
  for (const PendingExit& pending : pending_exits_) {
    report.exits.push_back(pending.exit);
    report.last_exit_sequence = pending.sequence;
  }
  report.unrecorded_checkpoints.Swap(&unrecorded_checkpoints_);
  return report;
}

void TrainerSupervisor::ApplyAssignments(const HeartbeatReport& report,
                                         const std::vector<v1::Assignment>& assignments) {
  absl::MutexLock lock(&mu_);
  while (!pending_exits_.empty() && pending_exits_.front().sequence <= report.last_exit_sequence) {
    pending_exits_.pop_front();
  }
  std::map<std::string, const v1::Assignment*> assigned;
  for (const v1::Assignment& assignment : assignments) assigned[assignment.job_id()] = &assignment;

  for (auto& [job_id, trainer] : trainers_) {
    auto it = assigned.find(job_id);
    if (it == assigned.end()) {
      if (!trainer.process->stopping()) {
        LOG(INFO) << "job " << job_id << " is no longer assigned: stopping its trainer (pid "
                  << trainer.process->pid() << ")";
        trainer.process->BeginStop(options_.kill_grace);
      }
    }
  }

  std::set<std::string> unreported_exits;
  for (const PendingExit& pending : pending_exits_) unreported_exits.insert(pending.exit.job_id());
  for (const auto& [job_id, assignment] : assigned) {
    if (trainers_.count(job_id) > 0 || unreported_exits.count(job_id) > 0) continue;
    StartLocked(*assignment);
  }
  if (metrics_ != nullptr) metrics_->SetTrainersRunning(trainers_.size());
}

void TrainerSupervisor::StartLocked(const v1::Assignment& assignment) {
  const std::string& job_id = assignment.job_id();
  if (!IsValidJobId(job_id)) {
    if (rejected_job_ids_.insert(job_id).second) {
      LOG(ERROR) << "refusing assignment with invalid job id '" << job_id << "' (want [a-z0-9-]{1,64})";
      RecordExitLocked(job_id, assignment.generation(), kSpawnFailedExitCode,
                       "worker refused the assignment: invalid job id");
    }
    return;
  }
  std::string job_dir = JobDir(job_id);
  std::error_code error;
  std::filesystem::create_directories(job_dir, error);
  if (error) {
    LOG(ERROR) << "cannot create " << job_dir << ": " << error.message();
    RecordExitLocked(job_id, assignment.generation(), kSpawnFailedExitCode,
                     absl::StrCat("cannot create job dir ", job_dir, ": ", error.message()));
    return;
  }
  // A message left by an earlier trainer of this job must not explain this
  // one's exit, nor its alive file speak for this one's generation.
  std::filesystem::remove(TerminationMessagePath(job_dir), error);
  std::filesystem::remove(TrainerAlivePath(job_dir), error);
  std::filesystem::remove(FinalReportPath(job_dir), error);
  // A release asked of an earlier trainer does not apply to this one.
  std::filesystem::remove(ReleaseRequestPath(job_dir), error);
  std::filesystem::remove(ReformRequestPath(job_dir), error);
  if (trainer_metrics_ != nullptr) trainer_metrics_->TrainerStarting(job_id, job_dir);

  std::optional<int> gpu = PickGpuLocked();
  SpawnOptions spawn;
  spawn.argv = BuildTrainerArgv(options_.command, job_id, job_dir, gpu);
  spawn.log_path = TrainerLogPath(job_dir);
  auto process = TrainerProcess::Spawn(spawn);
  if (!process.ok()) {
    if (trainer_metrics_ != nullptr) trainer_metrics_->TrainerExited(job_id);
    LOG(ERROR) << "job " << job_id << ": " << process.status().message();
    RecordExitLocked(job_id, assignment.generation(), kSpawnFailedExitCode,
                     std::string(process.status().message()));
    return;
  }
  LOG(INFO) << "job " << job_id << " generation " << assignment.generation() << " rank " << assignment.rank()
            << ": started trainer pid " << (*process)->pid() << ": " << absl::StrJoin(spawn.argv, " ");
  Trainer& trainer = trainers_[job_id];
  trainer.process = std::move(*process);
  trainer.generation = assignment.generation();
  trainer.gpu = gpu;
  trainer.job_dir = job_dir;
  trainer.started = std::chrono::system_clock::now();
}

void TrainerSupervisor::StopStuckLocked() {
  if (options_.stuck_after.count() <= 0) return;
  const auto now = std::chrono::system_clock::now();
  for (auto& [job_id, trainer] : trainers_) {
    if (trainer.process->stopping()) continue;
    auto last_sign = trainer.started;
    struct stat alive;
    if (stat(TrainerAlivePath(trainer.job_dir).c_str(), &alive) == 0) {
      const auto touched = std::chrono::system_clock::from_time_t(alive.st_mtim.tv_sec) +
                           std::chrono::nanoseconds(alive.st_mtim.tv_nsec);
      last_sign = std::max(last_sign, std::chrono::time_point_cast<std::chrono::system_clock::duration>(touched));
    }
    if (now - last_sign <= options_.stuck_after) continue;
    trainer.stuck_message = absl::StrCat(
        "killed by herd-worker: no sign of progress for ",
        std::chrono::duration_cast<std::chrono::seconds>(options_.stuck_after).count(), " s (--trainer-stuck-seconds)");
    LOG(WARNING) << "job " << job_id << ": trainer pid " << trainer.process->pid() << " " << trainer.stuck_message;
    trainer.process->BeginStop(options_.kill_grace);
  }
}

void TrainerSupervisor::RecordExitLocked(const std::string& job_id, int64_t generation, int exit_code,
                                         std::string message) {
  PendingExit pending;
  pending.sequence = next_exit_sequence_++;
  pending.exit.set_job_id(job_id);
  pending.exit.set_generation(generation);
  pending.exit.set_exit_code(exit_code);
  pending.exit.set_message(SanitizeUtf8(message, kMaxExitMessageBytes));
  pending_exits_.push_back(std::move(pending));
  if (metrics_ != nullptr) metrics_->RecordTrainerExit(exit_code);
}

std::optional<int> TrainerSupervisor::PickGpuLocked() const {
  if (options_.command.device != "cuda" || options_.gpus.empty()) return std::nullopt;
  // The GPU with the fewest trainers, lowest index first.
  std::map<int, int> load;
  for (int gpu : options_.gpus) load[gpu] = 0;
  for (const auto& [job_id, trainer] : trainers_) {
    if (trainer.gpu.has_value() && load.count(*trainer.gpu) > 0) ++load[*trainer.gpu];
  }
  int best = options_.gpus.front();
  for (int gpu : options_.gpus) {
    if (load[gpu] < load[best]) best = gpu;
  }
  return best;
}

// The last generation the trainer joined, as it wrote in its alive file,
// or the one it was started for.
int64_t TrainerSupervisor::JoinedGeneration(const Trainer& trainer) {
  std::ifstream file(TrainerAlivePath(trainer.job_dir));
  int64_t joined = 0;
  if (file >> joined && joined > trainer.generation) return joined;
  return trainer.generation;
}

int TrainerSupervisor::ReapLocked() {
  int exited = 0;
  for (auto it = trainers_.begin(); it != trainers_.end();) {
    std::optional<int> code = it->second.process->Poll();
    if (!code.has_value()) {
      ++it;
      continue;
    }
    const std::string& job_id = it->first;
    const Trainer& trainer = it->second;
    std::string message = !trainer.stuck_message.empty()
                              ? trainer.stuck_message
                              : ReadExitMessage(TerminationMessagePath(trainer.job_dir), TrainerLogPath(trainer.job_dir));
    const GenerationOutcome outcome = OutcomeOfExitCode(*code);
    LOG(INFO) << "job " << job_id << ": trainer pid " << trainer.process->pid() << " exited with code " << *code
              << " (" << OutcomeName(outcome) << ")" << (message.empty() ? "" : ": ") << message;
    RecordExitLocked(job_id, JoinedGeneration(trainer), *code, std::move(message));
    // A released trainer leaves the boundary's report, as a finished one its last.
    if (WritesFinalReport(outcome)) {
      auto report = ReadFinalReport(FinalReportPath(trainer.job_dir));
      if (report.ok()) {
        *pending_exits_.back().exit.mutable_final_progress() = *std::move(report);
      } else {
        LOG(WARNING) << "job " << job_id << ": " << report.status();
      }
    }
    // Whatever the exit: checkpoints it wrote but could not get recorded.
    const std::string unrecorded_path = UnrecordedCheckpointsPath(trainer.job_dir);
    if (auto records = ReadUnrecordedCheckpoints(unrecorded_path); records.ok()) {
      LOG(INFO) << "job " << job_id << ": its trainer left " << records->records_size()
                << " checkpoint record(s) unacknowledged; delivering them";
      unrecorded_checkpoints_.MergeFrom(*records);
      std::error_code ignored;
      std::filesystem::remove(unrecorded_path, ignored);
    } else if (!absl::IsNotFound(records.status())) {
      LOG(WARNING) << "job " << job_id << ": " << records.status();
    }
    if (trainer_metrics_ != nullptr) trainer_metrics_->TrainerExited(job_id);
    it = trainers_.erase(it);
    ++exited;
  }
  if (exited > 0 && metrics_ != nullptr) metrics_->SetTrainersRunning(trainers_.size());
  return exited;
}

int TrainerSupervisor::Poll() {
  absl::MutexLock lock(&mu_);
  StopStuckLocked();
  return ReapLocked();
}

void TrainerSupervisor::StopAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [job_id, trainer] : trainers_) trainer.process->BeginStop(options_.kill_grace);
  while (!trainers_.empty()) {
    ReapLocked();
    if (trainers_.empty()) break;
    mu_.Unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    mu_.Lock();
  }
}

std::string TrainerSupervisor::JobDir(const std::string& job_id) const {
  return absl::StrCat(options_.work_dir, "/jobs/", job_id);
}

bool TrainerSupervisor::Running(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return trainers_.count(job_id) > 0;
}

void TrainerSupervisor::AskToLeave(const std::vector<v1::JobLeavers>& leavers) {
  absl::MutexLock lock(&mu_);
  for (const v1::JobLeavers& job : leavers) {
    auto it = trainers_.find(job.job_id());
    if (it == trainers_.end() || it->second.process->stopping()) continue;
    const std::string path = ReleaseRequestPath(it->second.job_dir);
    const LeaveRequest request{job.generation(), {job.ranks().begin(), job.ranks().end()}};
    if (ReadReleaseRequest(path) == request) continue;  // asked already
    if (absl::Status written = WriteReleaseRequest(path, request); !written.ok()) {
      LOG(ERROR) << "job " << job.job_id() << ": " << written;
      continue;
    }
    LOG(INFO) << "job " << job.job_id() << ": rank(s) " << absl::StrJoin(request.ranks, ",") << " of generation "
              << request.generation << " leave at the next step boundary; told its trainer (pid "
              << it->second.process->pid() << ")";
  }
}

void TrainerSupervisor::ReformJobs(const std::vector<v1::ReformRequest>& requests) {
  absl::MutexLock lock(&mu_);
  for (const v1::ReformRequest& request : requests) {
    auto it = trainers_.find(request.job_id());
    if (it == trainers_.end() || it->second.process->stopping()) continue;
    const std::string path = ReformRequestPath(it->second.job_dir);
    if (ReadReformRequest(path) == request.generation()) continue;  // asked already
    if (absl::Status written = WriteReformRequest(path, request.generation()); !written.ok()) {
      LOG(ERROR) << "job " << request.job_id() << ": " << written;
      continue;
    }
    LOG(INFO) << "job " << request.job_id() << ": asked to re-form generation " << request.generation()
              << " at its next step boundary so workers can join";
  }
}

bool TrainerSupervisor::Drained() {
  absl::MutexLock lock(&mu_);
  return trainers_.empty() && pending_exits_.empty();
}

std::vector<std::string> TrainerSupervisor::RunningJobs() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> jobs;
  for (const auto& [job_id, trainer] : trainers_) jobs.push_back(job_id);
  return jobs;
}

}  // namespace herd::worker

