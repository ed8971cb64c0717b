// One generation of a job on one trainer: the step loop. It owns only what
// a membership change replaces (communicators, the sync strategy, the batch
// feed with its shares) and trains the job context (training_context.h),
// which outlives it: a re-formed generation never reloads data or model.
//
// Where the generation starts, what a commit point keeps and whether the
// generation ends at a step boundary belong to the GenerationManager
// (generation_manager.h); one step to TrainingStep (training_step.h); the
// report to the progress book (report/), checkpoints to the checkpoint
// keeper (checkpoint/). Run() ends with how the generation ended
// (generation_outcome.h); after a boundary other ranks left at or a
// failure, the caller joins the next generation (generation_loop.h).
#pragma once

#include <torch/types.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "proto/herd.pb.h"
#include "worker/comm/communicator.h"
#include "worker/contract/generation_outcome.h"
#include "worker/train/batches/batch_feed.h"
#include "worker/train/generation/coordinator_link.h"
#include "worker/train/generation/waiting_mark.h"
#include "worker/train/generation_manager.h"
#include "worker/train/group_communicators.h"
#include "worker/train/report/progress_book.h"
#include "worker/train/step/step_capture.h"
#include "worker/train/sync/communicator_replica_sum.h"
#include "worker/train/sync/sync_strategy.h"
#include "worker/train/training_context.h"
#include "worker/train/training_step.h"

namespace herd {

class Trainer {
 public:
  // `client` and `context` must outlive the trainer; `communicators` makes
  // the generation's communicators (CreateGroupCommunicators for real).
  Trainer(CoordinatorLink* client, TrainingContext* context, v1::JoinGenerationResponse join,
          CommunicatorFactory communicators);
  ~Trainer();

  GenerationResult Run();
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
  absl::Status CommitPoint(bool final);
  // The commit point's agreement: replica hashes checked and the interval's
  // step times of every rank, its straggler and the shares re-planned.
  absl::Status AgreeAtCommit(CommitFacts* facts);
  // Rank 0's report of a commit point, and the vote on leaving.
  absl::Status ReportAndVote(CommitFacts facts);
  absl::Status RunEval();
  absl::Status SaveFinalModel();
  // Makes the model's buffers identical on all ranks (rank 0's), where
  // each rank updates them from its own batch (norm: batch).
  absl::Status AgreeOnBuffers();
  bool Done() const;
  CaptureEnvironment CaptureEnvironmentNow() const;

  CoordinatorLink* client_;
  TrainingContext& ctx_;
  v1::JoinGenerationResponse join_;
  const v1::JobSpec& spec_;
  TrainingPosition& pos_;  // ctx_.position()
  ProgressBook& book_;     // ctx_.progress()

  CommunicatorFactory make_communicators_;
  // Posts this rank's long waits on its peers for the roll call
  // (generation/waiting_mark.h); null where no marks are posted. Before
  // group_ and what uses it: the waits end as they go.
  std::unique_ptr<WaitingMarker> waiting_marker_;
  GroupCommunicators group_;
  // group_'s communicators as this rank uses them: each collective a wait
  // told to waiting_marker_ (the communicator itself where no marks are
  // posted). Each marked one once: inner -> marked.
  std::vector<std::pair<Communicator*, std::unique_ptr<Communicator>>> marked_;
  Communicator* Marked(Communicator* inner);
  Communicator* comm_ = nullptr;  // group_.control: hashes, evaluation, healing
  std::unique_ptr<SyncStrategy> sync_;
  std::unique_ptr<GenerationManager> manager_;
  // The model's cross-rank sum for this generation (sync_batch); when the
  // model uses it, its training forward is a collective.
  std::unique_ptr<CommunicatorReplicaSum> replica_sum_;
  bool collective_forward_ = false;
  std::unique_ptr<BatchFeed> feed_;
  std::unique_ptr<TrainingStep> step_;

  int64_t total_steps_ = 0;
  int64_t last_commit_step_ = 0;
  int64_t running_step_ = 0;  // the step under way (0 between steps), so an exception names it
  std::optional<GenerationResult> boundary_;  // set by the vote that ends this generation
  std::vector<v1::ModelFile> final_model_files_;  // what SaveFinalModel wrote
  StepCapture step_capture_;  // cuda_graphs: whether this generation may capture
};

}  // namespace herd
