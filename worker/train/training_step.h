// One training step of a generation on one rank: this rank's micro-batches
// forward and backward (scaled so the ranks' gradients sum to the global
// batch's mean), the learning rate, the sync's update, whether the ranks
// keep the step (on_nonfinite), the position advanced, and the step's
// metrics and host/device times. The trainer (trainer.h) loops over it.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "worker/train/batches/batch_feed.h"
#include "worker/train/optim/lr_schedule.h"
#include "worker/train/report/progress_book.h"
#include "worker/train/report/step_time_window.h"
#include "worker/train/report/trainer_metrics.h"
#include "worker/train/graphed_step.h"
#include "worker/train/step/step_capture.h"
#include "worker/train/sync/communicator_replica_sum.h"
#include "worker/train/sync/sync_strategy.h"
#include "worker/train/training_context.h"

namespace herd {

// Where the step just taken left training, for the sync's rounds and the
// commit cadence. `rank_samples` and `step_samples`: the step's samples,
// this rank's and all ranks'; `epoch_end`: the step used up its epoch.
StepBoundary BoundaryAt(const v1::JobSpec& spec, const TrainingPosition& pos, int64_t last_commit_step,
                        int64_t rank_samples = 0, int64_t step_samples = 0, bool epoch_end = false);

struct StepSetup {
  SyncStrategy* sync = nullptr;
  BatchFeed* feed = nullptr;
  CommunicatorReplicaSum* replica_sum = nullptr;  // its failure fails the step
  bool collective_forward = false;  // the model's training forward is a collective
  LearningRatePlan lr_plan;
  int64_t total_steps = 0;
  // The generation's first step (allocations, lazy initialization) is no
  // measure of a rank's speed: left out of the straggler window.
  int64_t first_step = 0;
  // cuda_graphs: each step's capture/replay decision (null: every step
  // eager), and the generation it decides for.
  StepCapture* capture = nullptr;
  int64_t generation = 0;
};

class TrainingStep {
 public:
  // `context` and everything in `setup` must outlive the step runner.
  TrainingStep(TrainingContext* context, StepSetup setup);

  // Trains the step after the context's position and advances it; true in
  // `epoch_end` when the step used up its epoch.
  absl::Status Run(int64_t last_commit_step, bool* epoch_end);
  // Host and device time per step since the last call (commit points).
  std::optional<StepTimes> CloseTimes() { return times_.Close(); }

 private:
  void RunMicroBatches(const StepPlan& plan, bool local, StepTimer* timer, StepStats* stats,
                       ProgressWindow* step_losses);
  // Returns the detached loss; `losses` null: not accounted (a captured step's is, after replay).
  torch::Tensor ForwardBackward(const Batch& batch, int64_t rows, double share, StepTimer* timer, StepStats* stats,
                                ProgressWindow* losses);
  // The step's batches, forward, backward and update: captured or
  // replayed where `capture` says so, else eagerly.
  absl::Status Train(const StepPlan& plan, bool local, StepTimer* timer, StepStats* stats);
  absl::Status Update(bool local, const ProgressWindow& step_losses);
  // The schedule's rate for this step into the report and the optimizer.
  void SetStepLearningRate();
  void Observe(StepStats stats) const;
  // cuda_graphs: this step's action, and the step run as a graph (false:
  // the capture failed and was reported; run the step eagerly).
  StepAction NextAction(const StepPlan& plan);
  absl::StatusOr<bool> RunGraphed(const StepPlan& plan, StepAction action, StepTimer* timer, StepStats* stats);
  // What the graph captures: forward, loss, backward, clipping, optimizer.
  GraphedOutputs GraphBody(const Batch& batch, int64_t rows, const torch::Tensor& lr);
  // The graph's loss and gradient norm into the interval's report, as
  // ForwardBackward and Update account an eager step's.
  void AccountGraphed(int64_t rows);

  TrainingContext& ctx_;
  const StepSetup setup_;
  ProgressBook& book_;
  StepTimeWindow times_;
  std::unique_ptr<GraphedStep> graph_;  // cuda_graphs where the generation may capture
};

}  // namespace herd
