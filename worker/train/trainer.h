// One generation of a job on one trainer: the step loop. It owns only what
// a membership change replaces (communicators, gradient sync, parameter
// averaging, the batch shares) and trains the job context
// (training_context.h), which outlives it: a re-formed generation never
// reloads data or model.
//
// Where the generation starts, what a commit point keeps and whether the
// generation ends at a step boundary belong to the GenerationManager
// (generation_manager.h); the report to the progress book (report/), the
// checkpoints to the checkpoint keeper (checkpoint/). Run() ends with how
// the generation ended (generation_outcome.h); after a boundary other ranks
// left at or a failure, the caller joins the next generation
// (generation_loop.h).
#pragma once

#include <torch/types.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "proto/herd.pb.h"
#include "worker/comm/communicator.h"
#include "worker/contract/generation_outcome.h"
#include "worker/train/batches/batch_shares.h"
#include "worker/train/batches/sampler.h"
#include "worker/train/generation/coordinator_link.h"
#include "worker/train/generation_manager.h"
#include "worker/train/group_communicators.h"
#include "worker/train/optim/lr_schedule.h"
#include "worker/train/report/progress_book.h"
#include "worker/train/report/step_time_window.h"
#include "worker/train/report/trainer_metrics.h"
#include "worker/train/step/step_capture.h"
#include "worker/train/sync/communicator_replica_sum.h"
#include "worker/train/sync/sync_strategy.h"
#include "worker/train/training_context.h"

namespace herd {

class Trainer {
 public:
  // `client` and `context` must outlive the trainer; `communicators` makes
  // the generation's communicators (CreateGroupCommunicators for real).
  Trainer(CoordinatorLink* client, TrainingContext* context, v1::JoinGenerationResponse join,
          CommunicatorFactory communicators);
  ~Trainer();

  GenerationEnd Run();
  // The step under way when Run ended (the last one done when it ended
  // between steps): what a failure report names.
  int64_t step_reached() const { return running_step_ > 0 ? running_step_ : pos_.step; }

 private:
  // Trains until training is done, the generation ends at a step boundary
  // (boundary_ is set, the status OK) or it fails.
  absl::Status TrainGeneration();
  absl::Status Setup();
  absl::Status ConnectGroup();
  void PlanGeneration(double setup_seconds);
  // After the last step: final evaluation, replicas verified bitwise, the
  // final model written, the final commit point.
  absl::Status Finish();

  absl::Status TrainStep();
  // Forward and backward of this rank's micro-batches of `plan`.
  void RunMicroBatches(const StepPlan& plan, bool local, int64_t mine, StepTimer* timer, StepStats* stats,
                       ProgressWindow* step_losses);
  // One micro-batch's forward and backward on `batch` (`rows` samples), its
  // loss scaled by `share`, its loss summed into `losses`.
  void ForwardBackward(const Batch& batch, int64_t rows, double share, StepTimer* timer, StepStats* stats,
                       ProgressWindow* losses);
  // After the backward: the learning rate, the sync's update, and whether
  // the ranks keep the step.
  absl::Status Update(bool local, const ProgressWindow& step_losses);
  // The micro-batch at `indices`, on the model's device.
  Batch TakeBatch(const std::vector<int64_t>& indices);
  // Queues the next step's batches with the prefetcher, planned from where
  // this step (of `step_samples` samples over all ranks) leaves training.
  void PrefetchNextStep(int64_t step_samples);
  void RecordInLedger(const std::vector<std::vector<int64_t>>& micro_batches);
  void ObserveStep(StepStats stats) const;

  absl::Status CommitPoint(bool final);
  // The commit point's agreement: replica hashes checked and the interval's
  // step times of every rank, its straggler and the shares re-planned.
  absl::Status AgreeAtCommit(CommitFacts* facts);
  // sync.shares throughput: new shares from the interval's step times.
  void ReplanShares(const std::vector<RankStepTimes>& times);
  void ReportStepTimes();
  absl::Status RunEval();
  absl::Status SaveFinalModel();
  // Makes the model's buffers identical on all ranks (rank 0's), where
  // each rank updates them from its own batch (norm: batch).
  absl::Status AgreeOnBuffers();
  std::vector<torch::Tensor> ReplicaState() const;  // parameters and buffers
  StepBoundary Boundary(int64_t rank_samples = 0, int64_t step_samples = 0, bool epoch_end = false) const;
  bool Done() const;
  CaptureEnvironment CaptureEnvironmentNow() const;

  CoordinatorLink* client_;
  TrainingContext& ctx_;
  v1::JoinGenerationResponse join_;
  const v1::JobSpec& spec_;
  TrainingPosition& pos_;  // ctx_.position()
  ProgressBook& book_;     // ctx_.progress()

  CommunicatorFactory make_communicators_;
  GroupCommunicators group_;
  Communicator* comm_ = nullptr;  // group_.control: hashes, evaluation, healing
  std::unique_ptr<SyncStrategy> sync_;
  std::unique_ptr<GenerationManager> manager_;
  // The model's cross-rank sum for this generation (sync_batch); when the
  // model uses it, its training forward is a collective.
  std::unique_ptr<CommunicatorReplicaSum> replica_sum_;
  bool collective_forward_ = false;

  // Samples of each rank per step this generation (batch_shares.h), and
  // what the last commit point's plan carries to the next.
  std::vector<int64_t> shares_;
  ShareHistory share_history_;
  // The generation's first step (allocations, lazy initialization) is no
  // measure of a rank's speed: left out of the straggler window.
  int64_t first_step_ = 0;
  int64_t total_steps_ = 0;
  LearningRatePlan lr_plan_;
  int64_t last_commit_step_ = 0;
  int64_t running_step_ = 0;  // the step under way (0 between steps), so an exception names it
  std::optional<GenerationEnd> boundary_;  // set by the vote that ends this generation
  std::vector<v1::ModelFile> final_model_files_;  // what SaveFinalModel wrote
  StepCapture step_capture_;  // cuda_graphs: whether this generation may capture
  StepTimeWindow step_times_;  // host and device time per step over the log interval
};

}  // namespace herd
