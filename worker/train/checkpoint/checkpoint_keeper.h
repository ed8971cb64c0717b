// A trainer process's checkpoints across its generations: the background
// writer (made at the first save), the last step a save was tried at, and
// the warnings users see in herd status: a write that failed (under
// checkpoint.on_failure: continue) and a restore that fell back to an older
// checkpoint. Only the rank that saves (rank 0 of a generation) writes.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/herd.pb.h"
#include "worker/models/model.h"
#include "worker/train/checkpoint/checkpoint_writer.h"
#include "worker/train/step/training_position.h"

namespace herd {

struct CheckpointKeeperOptions {
  std::string root;  // checkpoint storage (shared by all workers of a cluster)
  std::string job_id;
  v1::OptimizerSpec optimizer;  // the job's: the copied state is written in its format
  int64_t interval_steps = 0;   // checkpoint.interval_steps; 0: none periodic
  bool fail_on_error = false;   // checkpoint.on_failure: fail
  CheckpointSinks sinks;  // where each write's record and result go
  std::function<void(int64_t step)> before_write;  // tests: holds a write in flight
};

// The training state a save copies.
struct CheckpointState {
  Model* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  TrainingPosition position;
  std::vector<torch::Tensor> outer;  // the sync's outer optimizer state
  int64_t generation = 0;
  double learning_rate = 0;
};

// Applies one checkpoint's files to the training state; returns the
// position they hold.
using ApplyCheckpoint = std::function<absl::StatusOr<TrainingPosition>(const std::map<std::string, std::string>&)>;

class CheckpointKeeper {
 public:
  explicit CheckpointKeeper(CheckpointKeeperOptions options);

  // At a commit point of the saving rank: what earlier writes came to (a
  // failure under on_failure: fail ends the job here), a save when the
  // interval is due, and at the final one a wait for every write.
  // Others only collect what their earlier writes came to. `state` is
  // called only for a save.
  absl::Status AtCommit(bool final, bool saving_rank, int64_t step,
                        const std::function<CheckpointState()>& state);
  // Saves now unless this step was saved already; waits for the write.
  absl::Status SaveAndWait(const CheckpointState& state);
  // Whether `step` is on disk with no failure since.
  bool Holds(int64_t step) const { return last_step_ == step && write_warning_.empty(); }
  // The process's exit: waits for the write under way; what writes came to
  // is only logged (training is over either way).
  void DrainAtExit();

  // The catalog's newest (`preferred`), else older folders on disk: a
  // corrupt or truncated checkpoint is skipped for the previous complete
  // one, and the fallback becomes a warning.
  absl::Status RestoreNewest(const std::string& preferred, const ApplyCheckpoint& apply);

  // Storage trouble and restore fallbacks, "" when none.
  std::string Warning() const;

 private:
  absl::Status Save(const CheckpointState& state);
  absl::Status FinishWrites();
  absl::Status TakeOutcomes();

  const CheckpointKeeperOptions options_;
  std::unique_ptr<CheckpointWriter> writer_;
  int64_t last_step_ = -1;  // tried once per step, whatever the outcome
  std::string write_warning_;    // the first failure not followed by a success
  std::string restore_warning_;  // kept for the job's life in this process
};

}  // namespace herd
