// One generation of a job on one trainer: the group. It owns only what a
// membership change replaces (communicators, gradient sync, parameter
// averaging) and trains the job context (worker/train/training_context.h),
// which outlives it: a re-formed generation never reloads data or model.
//
// Run() starts by healing: the ranks pick the newest commit any of them
// holds and its holder broadcasts it (healing.h); with none, the newest
// checkpoint, else rank 0's fresh parameters. It ends with how the
// generation ended (generation_outcome.h): completed, at a step boundary the
// ranks voted on (release_vote.h), or failed; after a boundary other ranks
// left at or a generation failure (a collective failed or timed out, the
// coordinator fenced the generation) the caller joins the next generation
// (generation_loop.h).
#pragma once

#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/herd.pb.h"
#include "worker/comm/communicator.h"
#include "worker/contract/generation_outcome.h"
#include "worker/train/batch_shares.h"
#include "worker/train/communicator_replica_sum.h"
#include "worker/train/coordinator_link.h"
#include "worker/train/final_model.h"
#include "worker/train/group_communicators.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/sampler.h"
#include "worker/train/step_capture.h"
#include "worker/train/step_time_window.h"
#include "worker/train/straggler.h"
#include "worker/train/sync_strategy.h"
#include "worker/train/trainer_metrics.h"
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
  absl::Status TrainStep();
  // This rank's micro-batches of the next step from the current position,
  // by the generation's shares.
  StepPlan NextMicroBatches() const;
  // The step's sample ids into the sample ledger, where one is kept.
  void RecordInLedger(const std::vector<std::vector<int64_t>>& micro_batches);
  // The micro-batch at `indices`, on the model's device: prefetched where
  // the context has a prefetcher (batch_prefetcher.h), else gathered here.
  Batch TakeBatch(const std::vector<int64_t>& indices);
  // Queues the next step's batches with the prefetcher, planned from where
  // this step (of `step_samples` samples over all ranks) leaves training.
  void PrefetchNextStep(int64_t step_samples);
  // One micro-batch's forward and backward on `batch` (`rows` samples), its
  // loss scaled by `share`. Its loss goes into `losses` (the progress
  // window, or the step's own under on_nonfinite: skip_step).
  void ForwardBackward(const Batch& batch, int64_t rows, double share, StepTimer* timer, StepStats* stats,
                       ProgressWindow* losses);
  // After the update: the step's losses join the window unless the ranks
  // dropped the step (skip_step: counted and warned), and the gradient norm
  // is checked (fail).
  void KeepOrDropStep(const ProgressWindow& step_losses);
  // The step's metrics (with what the sync cost), where metrics are kept.
  void ObserveStep(StepStats stats) const;
  absl::Status CommitPoint(bool final);
  // At a commit point with 2+ ranks: one all-gather of every rank's replica
  // hash (checked: a mismatch fails) and step times of the log interval
  // (for straggler detection and throughput shares), indexed by rank.
  absl::StatusOr<std::vector<RankStepTimes>> GatherAtCommit();
  // sync.shares throughput: new shares from the interval's step times, the
  // same on every rank (batch_shares.h).
  void ReplanShares(const std::vector<RankStepTimes>& times);
  // At a commit point: the report's loss and throughput from the progress
  // window (its one host read), and a new window.
  // INVALID_ARGUMENT (the job fails) when on_nonfinite: fail saw a
  // non-finite loss or gradient norm since the last commit point.
  absl::Status CloseProgressWindow(bool final);
  absl::Status RunEval();
  absl::Status SaveFinalModel();
  // Rank 0 at a commit point: collects what earlier checkpoint writes came
  // to (checkpoint.on_failure), starts one when due, and at the final one
  // waits for the writes.
  absl::Status CheckpointAtCommit(bool final);
  absl::Status SaveCheckpoint();
  absl::Status FinishCheckpointWrites();
  absl::Status TakeCheckpointOutcomes();
  absl::Status RestoreFromCheckpoint();
  // Where this generation starts: the newest in-memory commit of any rank,
  // else the newest checkpoint, else rank 0's fresh parameters.
  absl::Status ChooseStartingState();
  absl::Status RestoreFiles(const std::map<std::string, std::string>& files);
  absl::Status RestoreOwnCommit();
  // The sync's outer and per-rank state and the training position, after
  // parameters and optimizer were restored.
  absl::Status ResumeAt(const TrainingPosition& position, const std::vector<torch::Tensor>& outer,
                        const std::vector<torch::Tensor>& rank_state);
  absl::Status Commit();
  // What the coordinator answered the reporter: fenced or cancelled.
  absl::Status CheckCoordinatorVerdict() const;
  // At a commit point: ends the generation (boundary_) when any rank leaves
  // here or the job re-forms.
  absl::Status VoteOnRelease();
  // Every rank leaves at this boundary: rank 0 checkpoints it and waits for
  // the coordinator to record it; true on every rank once it did.
  absl::StatusOr<bool> CheckpointForAllLeaving();
  int64_t TotalSteps() const;
  bool Done() const;
  void ZeroGrads();
  // Where the step just taken left training (for rounds and commits).
  // `rank_samples` and `step_samples`: the step's samples, this rank's and
  // all ranks'; `epoch_end`: the step used up its epoch.
  StepBoundary Boundary(int64_t rank_samples = 0, int64_t step_samples = 0, bool epoch_end = false) const;
  // Makes the model's buffers identical on all ranks (rank 0's), where
  // each rank updates them from its own batch (norm: batch).
  absl::Status AgreeOnBuffers();
  // Parameters and buffers: what replicas must agree on.
  std::vector<torch::Tensor> ReplicaState() const;

  CoordinatorLink* client_;
  TrainingContext& ctx_;
  v1::JoinGenerationResponse join_;
  const v1::JobSpec& spec_;
  TrainingPosition& pos_;  // ctx_.position

  CommunicatorFactory make_communicators_;
  GroupCommunicators group_;
  Communicator* comm_ = nullptr;  // group_.control: hashes, evaluation, healing
  std::unique_ptr<SyncStrategy> sync_;
  // The model's cross-rank sum for this generation (sync_batch); when the
  // model uses it, its training forward is a collective.
  std::unique_ptr<CommunicatorReplicaSum> replica_sum_;
  bool collective_forward_ = false;

  // Samples of each rank per step this generation (batch_shares.h).
  std::vector<int64_t> shares_;
  // What the last commit point's plan carries to the next: the smoothed
  // fractions of a step the ranks' rates call for, and the rank that bounded
  // the last interval (PlanThroughputShares).
  ShareHistory share_history_;
  // The generation's first step (allocations, lazy initialization) is no
  // measure of a rank's speed: left out of the straggler window.
  int64_t first_step_ = 0;
  int64_t total_steps_ = 0;
  LearningRatePlan lr_plan_;
  int64_t last_commit_step_ = 0;
  // The step under way (0 between steps), so an exception names it.
  int64_t running_step_ = 0;
  // Set by the vote that ends this generation at a step boundary.
  std::optional<GenerationEnd> boundary_;
  // What SaveFinalModel wrote; the final report carries it.
  std::vector<v1::ModelFile> final_model_files_;
  // cuda_graphs (step_capture.h): whether this generation may capture.
  StepCapture step_capture_;
  // Host and device time per step over the log interval.
  StepTimeWindow step_times_;
  CaptureEnvironment CaptureEnvironmentNow() const;
  // At a commit point: the interval's host and device time per step.
  void ReportStepTimes();
};

}  // namespace herd
