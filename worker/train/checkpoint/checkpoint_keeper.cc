#include "worker/train/checkpoint/checkpoint_keeper.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/train/checkpoint/checkpoint_files.h"
#include "worker/train/optim/optimizer_factory.h"

namespace herd {

CheckpointKeeper::CheckpointKeeper(CheckpointKeeperOptions options) : options_(std::move(options)) {}

absl::Status CheckpointKeeper::AtCommit(bool final, bool saving_rank, int64_t step,
                                        const std::function<CheckpointState()>& state) {
  // What earlier writes came to first: a failure under on_failure: fail
  // ends the job here, at the commit point after it.
  if (auto s = TakeOutcomes(); !s.ok()) return s;
  const int64_t interval = options_.interval_steps;
  if (saving_rank && interval > 0 && step % interval == 0 && step != last_step_) {
    if (auto s = Save(state()); !s.ok()) return s;
  }
  // The final report tells what every write came to.
  if (!final) return absl::OkStatus();
  return FinishWrites();
}

absl::Status CheckpointKeeper::SaveAndWait(const CheckpointState& state) {
  // The interval may have written this very step already.
  absl::Status saved = FinishWrites();
  if (saved.ok() && !Holds(state.position.step)) {
    saved = Save(state);
    if (saved.ok()) saved = FinishWrites();
  }
  return saved;
}

absl::Status CheckpointKeeper::Save(const CheckpointState& state) {
  last_step_ = state.position.step;
  if (writer_ == nullptr) {
    CheckpointWriterOptions options;
    options.root = options_.root;
    options.job_id = options_.job_id;
    options.make_optimizer = [optimizer = options_.optimizer](std::vector<torch::Tensor> params) {
      return MakeOptimizer(optimizer, std::move(params));
    };
    options.sinks = options_.sinks;
    options.before_write = options_.before_write;
    writer_ = std::make_unique<CheckpointWriter>(std::move(options));
  }
  // Only the host copy happens here; the files are written off the step
  // loop (a second save waits for the first).
  return writer_->Save(state.model, state.optimizer, state.position, state.outer, state.generation,
                       state.learning_rate);
}

absl::Status CheckpointKeeper::FinishWrites() {
  if (writer_ != nullptr) writer_->Wait();
  return TakeOutcomes();
}

absl::Status CheckpointKeeper::TakeOutcomes() {
  if (writer_ == nullptr) return absl::OkStatus();
  for (const CheckpointOutcome& outcome : writer_->TakeFinished()) {
    if (outcome.status.ok()) {
      write_warning_.clear();
      continue;
    }
    // Storage trouble (full, read-only, missing, failing) costs the job one
    // checkpoint, not its progress, unless the job asked to fail.
    const std::string cause = absl::StrCat("checkpoint at step ", outcome.step, " failed: ", outcome.status.message());
    if (options_.fail_on_error) {
      return absl::Status(absl::StatusCode::kResourceExhausted, absl::StrCat(cause, " (checkpoint.on_failure: fail)"));
    }
    LOG(WARNING) << cause << "; training goes on (checkpoint.on_failure: continue)";
    if (write_warning_.empty()) write_warning_ = cause;
  }
  return absl::OkStatus();
}

void CheckpointKeeper::DrainAtExit() {
  if (writer_ == nullptr) return;
  writer_->Wait();
  for (const CheckpointOutcome& outcome : writer_->TakeFinished()) {
    LOG_IF(WARNING, !outcome.status.ok()) << "checkpoint at step " << outcome.step << " failed: " << outcome.status;
  }
}

absl::Status CheckpointKeeper::RestoreNewest(const std::string& preferred, const ApplyCheckpoint& apply) {
  std::vector<std::string> candidates = {preferred};
  for (const auto& folder : ListCheckpointFolders(options_.root, options_.job_id)) {
    if (folder.relative_path != preferred) candidates.push_back(folder.relative_path);
  }
  std::vector<std::string> skipped;  // "PATH: why", newest first
  for (const auto& path : candidates) {
    auto files = ReadCheckpointFolder(options_.root, path);
    absl::StatusOr<TrainingPosition> restored = files.ok() ? apply(*files) : files.status();
    if (!restored.ok()) {
      LOG(WARNING) << "skipping checkpoint " << path << ": " << restored.status();
      skipped.push_back(absl::StrCat(path, ": ", restored.status().message()));
      continue;
    }
    last_step_ = restored->step;
    LOG(INFO) << "resumed from checkpoint " << path << " at step " << restored->step << " (epoch " << restored->epoch
              << ", " << restored->samples_in_epoch << " samples into it)";
    if (!skipped.empty()) {
      // Users see the fallback in herd status and herd watch, not only here.
      restore_warning_ = absl::StrCat("unusable checkpoint skipped (", absl::StrJoin(skipped, "; "), "); resumed from ",
                                      path, " at step ", restored->step);
    }
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat("no usable checkpoint for job ", options_.job_id, " under ", options_.root,
                                          " (tried ", candidates.size(), ")"));
}

std::string CheckpointKeeper::Warning() const {
  std::vector<std::string> warnings;
  for (const std::string* w : {&write_warning_, &restore_warning_}) {
    if (!w->empty()) warnings.push_back(*w);
  }
  return absl::StrJoin(warnings, "; ");
}

}  // namespace herd
