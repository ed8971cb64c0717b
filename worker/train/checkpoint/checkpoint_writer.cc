#include "worker/train/checkpoint/checkpoint_writer.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/train/optim/optimizer_factory.h"

namespace herd {

CheckpointWriter::CheckpointWriter(CheckpointWriterOptions options)
    : options_(std::move(options)), thread_([this] { Run(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return !pending_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

absl::Status CheckpointWriter::Save(Model* model, torch::optim::Optimizer* optimizer, const TrainingPosition& position,
                                    const std::vector<torch::Tensor>& outer_state, int64_t generation,
                                    double learning_rate) {
  Wait();
  try {
    if (auto s = snapshot_.Capture(model, optimizer, position, outer_state); !s.ok()) return s;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("copying the training state for a checkpoint: ", e.what()));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_ = generation;
    learning_rate_ = learning_rate;
    pending_ = true;
  }
  changed_.notify_all();
  return absl::OkStatus();
}

void CheckpointWriter::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [this] { return !pending_; });
}

std::vector<CheckpointOutcome> CheckpointWriter::TakeFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CheckpointOutcome> out;
  out.swap(finished_);
  return out;
}

void CheckpointWriter::Run() {
  while (true) {
    int64_t generation = 0;
    double learning_rate = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [this] { return pending_ || stopping_; });
      if (!pending_) return;
      generation = generation_;
      learning_rate = learning_rate_;
    }
    CheckpointOutcome outcome = Write(generation, learning_rate);
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_.push_back(std::move(outcome));
      pending_ = false;
    }
    changed_.notify_all();
  }
}

CheckpointOutcome CheckpointWriter::Write(int64_t generation, double learning_rate) {
  const TrainingPosition& position = snapshot_.position();
  CheckpointOutcome outcome;
  outcome.step = position.step;
  if (options_.before_write) options_.before_write(position.step);
  const auto started = std::chrono::steady_clock::now();
  auto files = snapshot_.Serialize([&](std::vector<torch::Tensor> params) {
    auto optimizer = options_.make_optimizer(std::move(params));
    if (optimizer.ok()) SetLearningRate(optimizer->get(), learning_rate);
    return optimizer;
  });
  if (!files.ok()) {
    if (options_.sinks.failed) options_.sinks.failed();
    outcome.status = files.status();
    return outcome;
  }
  auto folder = WriteCheckpointFolder(options_.root, options_.job_id, position.step, *files);
  if (!folder.ok()) {
    if (options_.sinks.failed) options_.sinks.failed();
    outcome.status = folder.status();
    return outcome;
  }
  outcome.folder = *folder;
  // Recorded only now that it is complete on disk.
  v1::CommitCheckpointRequest request;
  request.set_job_id(options_.job_id);
  request.set_generation(generation);
  request.set_step(position.step);
  request.set_epoch(position.epoch);
  request.set_samples_in_epoch(position.samples_in_epoch);
  request.set_path(folder->relative_path);
  request.set_size_bytes(folder->size_bytes);
  request.set_sha256(folder->manifest_sha256);
  if (options_.sinks.record) options_.sinks.record(std::move(request));
  if (options_.sinks.written) options_.sinks.written(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  LOG(INFO) << "checkpoint at step " << position.step << " (" << folder->size_bytes << " bytes) written to "
            << folder->relative_path << " in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
            << " s, off the step loop";
  return outcome;
}

}  // namespace herd
