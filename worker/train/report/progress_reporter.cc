#include "worker/train/report/progress_reporter.h"

#include <glog/logging.h>

#include <algorithm>

namespace herd {

ProgressReporter::ProgressReporter(CoordinatorLink* client,
                                   std::function<void(const v1::CommitCheckpointResponse&)> on_recorded,
                                   Options options)
    : client_(client), on_recorded_(std::move(on_recorded)), options_(options), thread_([this] { Run(); }) {}

ProgressReporter::~ProgressReporter() { Stop(); }

std::vector<v1::CommitCheckpointRequest> ProgressReporter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  return std::vector<v1::CommitCheckpointRequest>(checkpoints_.begin(), checkpoints_.end());
}

void ProgressReporter::PostProgress(v1::ReportProgressRequest report) {
  absl::MutexLock lock(&mu_);
  progress_ = std::move(report);
}

void ProgressReporter::PostCheckpoint(v1::CommitCheckpointRequest record) {
  absl::MutexLock lock(&mu_);
  checkpoints_.push_back(std::move(record));
}

int64_t ProgressReporter::fenced_generation() const {
  absl::MutexLock lock(&mu_);
  return fenced_generation_;
}

int64_t ProgressReporter::recorded_checkpoint_step() const {
  absl::MutexLock lock(&mu_);
  return recorded_checkpoint_step_;
}

bool ProgressReporter::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool ProgressReporter::Flush(std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !busy_ && !progress_.has_value() && checkpoints_.empty();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), absl::FromChrono(timeout));
}

void ProgressReporter::Fenced(int64_t generation) {
  absl::MutexLock lock(&mu_);
  fenced_generation_ = std::max(fenced_generation_, generation);
}

bool ProgressReporter::Send(const v1::ReportProgressRequest& report) {
  auto response = client_->ReportProgress(report);
  if (response.ok()) {
    if (response->cancelled()) {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    return true;
  }
  if (response.status().code() == absl::StatusCode::kFailedPrecondition) {
    // A newer generation exists (a peer failed, a worker joined or left).
    Fenced(report.generation());
    return true;
  }
  LOG_EVERY_N(WARNING, 10) << "progress report of step " << report.step()
                           << " failed (training continues, retrying): " << response.status();
  return false;
}

bool ProgressReporter::Send(const v1::CommitCheckpointRequest& record) {
  auto response = client_->CommitCheckpoint(record);
  if (response.ok()) {
    if (on_recorded_) on_recorded_(*response);
    absl::MutexLock lock(&mu_);
    recorded_checkpoint_step_ = std::max(recorded_checkpoint_step_, record.step());
    return true;
  }
  if (response.status().code() == absl::StatusCode::kFailedPrecondition) {
    // Not fatal: the files stay, the catalog misses one entry.
    LOG(WARNING) << "checkpoint at step " << record.step() << " written but not recorded: " << response.status();
    Fenced(record.generation());
    return true;
  }
  LOG_EVERY_N(WARNING, 10) << "recording the checkpoint of step " << record.step()
                           << " failed (retrying): " << response.status();
  return false;
}

void ProgressReporter::Run() {
  while (true) {
    std::optional<v1::CommitCheckpointRequest> record;
    std::optional<v1::ReportProgressRequest> report;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || progress_.has_value() || !checkpoints_.empty();
      };
      mu_.Await(absl::Condition(&work));
      if (stopping_) return;
      // Checkpoint records first: a progress report may refer to a step
      // whose checkpoint the catalog should already list.
      if (!checkpoints_.empty()) {
        record = checkpoints_.front();
      } else {
        report = std::move(progress_);
        progress_.reset();
      }
      busy_ = true;
    }
    const bool done = record.has_value() ? Send(*record) : Send(*report);
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (record.has_value() && done) checkpoints_.pop_front();
    // A failed report is retried unless a newer one replaced it meanwhile.
    if (report.has_value() && !done && !progress_.has_value()) progress_ = std::move(report);
    if (!done) {
      // Back off before the retry; a stop ends the wait early.
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(options_.retry_delay));
    }
  }
}

}  // namespace herd
