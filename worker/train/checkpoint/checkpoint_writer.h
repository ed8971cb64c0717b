// Writes checkpoints off the step loop. Save() only copies the training
// state to host memory (about a memcpy of the state; device-to-pinned-host
// copies on CUDA) and returns; a thread of the writer's own serializes the
// copy, writes the folder (checkpoint_files.h: temporary folder, fsync,
// MANIFEST last, rename, fsync of the parent) and hands its record to
// CheckpointSinks::record (the trainer posts it to the coordinator), in that
// order, so only complete checkpoints are ever recorded.
//
// One write at a time: a Save() while the previous write is under way waits
// for it, so there is one host copy and records arrive in step order. What
// each write came to (written, or the storage error) waits in TakeFinished()
// for the trainer's next commit point or its exit, where checkpoint.on_failure
// decides between a warning and failing the job.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "proto/herd.pb.h"
#include "worker/models/model.h"
#include "worker/train/checkpoint/checkpoint_files.h"
#include "worker/train/checkpoint/state_snapshot.h"

namespace herd {

// Where a writer's results go. The trainer points them at its progress
// reporter and metrics; hooks keep checkpoint free of report. Any may be
// unset.
struct CheckpointSinks {
  // A complete checkpoint's record, for the coordinator.
  std::function<void(v1::CommitCheckpointRequest record)> record;
  // A write that failed.
  std::function<void()> failed;
  // A write that completed, at this wall-clock time.
  std::function<void(double unix_seconds)> written;
};

struct CheckpointWriterOptions {
  std::string root;    // checkpoint storage
  std::string job_id;
  // An optimizer like the trainer's over given tensors (MakeOptimizer with
  // the job's spec): the copied state is written in its format.
  StateSnapshot::OptimizerFactory make_optimizer;
  CheckpointSinks sinks;
  // Runs on the writer's thread before each write: tests hold a write in
  // flight with it.
  std::function<void(int64_t step)> before_write;
};

// What one write came to.
struct CheckpointOutcome {
  int64_t step = 0;
  absl::Status status;  // OK: complete on disk and posted for recording
  CheckpointFolder folder;
};

class CheckpointWriter {
 public:
  explicit CheckpointWriter(CheckpointWriterOptions options);
  // Waits for the write under way: a checkpoint whose copy was taken is
  // never dropped half-written.
  ~CheckpointWriter();

  // Waits for the previous write, copies the state and hands the copy to the
  // writer's thread. Fails only when the copy fails (nothing is written
  // then). `generation` and `learning_rate` go with the record and the
  // optimizer state.
  absl::Status Save(Model* model, torch::optim::Optimizer* optimizer, const TrainingPosition& position,
                    const std::vector<torch::Tensor>& outer_state, int64_t generation, double learning_rate);
  // Waits until no write is under way.
  void Wait();
  // The writes finished since the last call, oldest first.
  std::vector<CheckpointOutcome> TakeFinished();

 private:
  void Run();
  CheckpointOutcome Write(int64_t generation, double learning_rate);

  const CheckpointWriterOptions options_;
  // Written by Save() only while no write is under way, read by the thread
  // only while one is: never both at once.
  StateSnapshot snapshot_{/*on_host=*/true};
  std::mutex mu_;
  std::condition_variable changed_;
  bool pending_ = false;  // a copy waits for, or is under, its write
  bool stopping_ = false;
  int64_t generation_ = 0;
  double learning_rate_ = 0;
  std::vector<CheckpointOutcome> finished_;
  std::thread thread_;
};

}  // namespace herd
