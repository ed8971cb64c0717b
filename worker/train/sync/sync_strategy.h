// How a generation keeps its replicas in agreement, chosen once per
// generation from the typed sync config (sync_config.h):
//   all-reduce: every step's gradients are summed (gradient_sync.h);
//   average:    after warmup steps of all-reduce, ranks step locally and a
//               round averages the parameters every `every` steps and
//               wherever replicas must agree (parameter_averaging.h).
//               Streaming (sync.fragments > 1 or sync.overlap_steps):
//               fragment f of F is averaged at local steps s with
//               s % every == ((f+1) * every / F) % every, counted from the
//               last full sync; its result is merged overlap_steps steps
//               later. Replicas then agree only at full syncs: all
//               fragments averaged at once, blocking, with no round in
//               flight, at epoch ends, evaluations, checkpoint steps, the
//               last step and once log_interval_steps * every steps have
//               passed since the last commit. Commits fall only there, so
//               no commit holds a round in flight or per-fragment anchors
//               (they equal the parameters).
//   allreduce with sync.shard_optimizer (ZeRO-1): the gradients are
//               reduce-scattered, each rank clips and steps its own range
//               of the optimizer and the ranges are all-gathered
//               (sharded_optimizer.h).
// The trainer asks the strategy, never the mode, whether a step is local,
// when a round runs and where commits may fall, and leaves the replica
// update (gradient sync, clipping, optimizer step, parameter sharing), its
// traffic and its state in commits and heals to it.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/models/model.h"
#include "worker/train/optim/fused_optimizer.h"
#include "worker/train/sync/gradient_sync.h"
#include "worker/train/sync/island_layout.h"
#include "worker/train/step/host_reads.h"
#include "worker/train/checkpoint/state_snapshot.h"
#include "worker/train/sync/sync_config.h"
#include "worker/train/sync/sync_traffic.h"

namespace herd {

// Where training stands right after a step's optimizer update.
struct StepBoundary {
  int64_t step = 0;             // steps done, this one included
  bool epoch_end = false;       // this step consumed the epoch's last samples
  bool eval_due = false;        // eval.interval_steps falls here
  bool checkpoint_due = false;  // checkpoint.interval_steps falls here
  bool done = false;            // the job's last step
  int64_t steps_since_commit = 0;
  int64_t log_interval = 1;     // log_interval_steps
  int64_t rank_samples = 0;     // this rank's samples in this step
  int64_t step_samples = 0;     // the whole step's, over all ranks
};

// What synchronization cost one step (both modes): for the step metrics.
struct SyncStepCost {
  // Blocked waiting for the network: the gradient sync's exposed wait after
  // backward, plus the averaging rounds finished at this step.
  double wait_seconds = 0;
  // In the update, finishing the gradient sync (its wait included): the
  // rest of the update is the optimizer's time.
  double finish_seconds = 0;
  int64_t wire_bytes = 0;  // counted into SyncTraffic::wire_bytes at this step
  int launched_during_backward = 0;
  // on_nonfinite: skip_step: the ranks agreed to drop this step (no update).
  bool skipped = false;
  // The gradient norm where clipping computed it on the device (else undefined).
  torch::Tensor grad_norm;
};

// What the update of one step needs from the trainer.
struct UpdateInputs {
  torch::optim::Optimizer* optimizer = nullptr;  // its learning rate already set
  double grad_clip_norm = 0;                     // 0: no clipping
  int64_t step = 0;                              // steps done before this one (errors name it)
  // on_nonfinite: skip_step: the step is dropped on every rank when any
  // rank's `step_loss` (its losses summed, on the device) or gradients hold
  // a NaN or infinity; one all-reduce of a flag and one host read decide.
  bool skip_nonfinite = false;
  torch::Tensor step_loss;
  HostReads* host_reads = nullptr;
  // A captured step (cuda_graphs): the learning rate as a float32 scalar on
  // the device, read by the fused kernels on every replay. Only the plain
  // all-reduce update with a fused optimizer step honours it; elsewhere the
  // update fails (a capture then falls back) rather than bake a stale rate in.
  torch::Tensor device_lr;
};


class SyncStrategy {
 public:
  virtual ~SyncStrategy();

  // Whether the step after `steps_done` steps trains without gradient sync.
  virtual bool LocalStep(int64_t steps_done) const = 0;
  // Whether the step's gradients are summed over ranks: every non-local
  // step, and with sync.islands_by local steps too (over the island).
  bool SyncsGradients(bool local) const { return StepGradients(local) != nullptr; }
  // The ranks whose samples the step's summed gradient covers: each scales
  // its loss by its samples over theirs, so the sum is their mean. All
  // ranks on a non-local step, this rank alone on a local one, its island's
  // ranks on an island's local step.
  virtual const std::vector<int>& GradientRanks(bool local) const { return local ? own_rank_ : all_ranks_; }
  // Before the backward of the last micro-batch of a step that syncs
  // gradients: its gradient hooks launch the sync's buckets as gradients arrive.
  void ArmBackward(bool local);
  // The replica update of a step, after its backward: finishes the gradient
  // sync (skipped on a local step), clips by the one rule (grad_clip.h),
  // steps the optimizer (the whole of it, or this rank's range), and shares
  // the parameters where ranks stepped ranges. The error names the step.
  // This base steps the whole optimizer on whole gradients.
  virtual absl::Status Update(bool local, const UpdateInputs& in);
  // After the update, once the position has moved: counts the step's
  // traffic into `traffic` (the one place it is counted) and, in mode
  // average, runs a round when one is due (a collective: every rank calls it
  // at the same boundary). The error names the step.
  virtual absl::Status AfterStep(bool local, const StepBoundary& at, SyncTraffic* traffic) = 0;
  // Before the step is captured as a CUDA graph (cuda_graphs): the fused
  // optimizer's device state caught up with the host's, so nothing of it is
  // refilled inside the graph.
  void BeforeCapture(torch::optim::Optimizer& optimizer) { fused_.CatchUp(optimizer); }
  // What the last step (Update and AfterStep) cost.
  const SyncStepCost& last_step() const { return last_step_; }
  // Whether a commit point falls here: replicas identical, and the log
  // interval since `last_commit_step` reached (or a checkpoint step, or done).
  virtual bool CommitDue(const StepBoundary& at, int64_t last_commit_step, int64_t log_interval) const = 0;

  // Training (re)starts from parameters identical on every rank (healed,
  // restored or broadcast).
  virtual void StartFromCurrentParameters() = 0;
  // Commits: captures the training state at `position` into `committed`
  // as `generation`'s commit, with the optimizer state whole (ZeRO-1 gathers
  // every rank's shard first, so no shard is lost with its rank) and the
  // sync's own outer and rank state. A checkpoint written right after holds
  // the same whole state. When the gather (a collective) fails, the previous
  // commit is kept; when the copy fails, none is.
  absl::Status Capture(Model* model, torch::optim::Optimizer* optimizer, const TrainingPosition& position,
                       int64_t generation, CommittedState* committed);
  // Heals and restores, after parameters and optimizer were restored: the
  // sync's outer state (empty: none saved) and this rank's own state (empty:
  // zeroed, the state being another rank's or a checkpoint's).
  absl::Status Resume(const std::vector<torch::Tensor>& outer, const std::vector<torch::Tensor>& rank_state);
  // Optimizer state of the sync itself (the outer momentum), for commits and
  // checkpoints; empty when there is none.
  virtual std::vector<torch::Tensor> OuterState() const = 0;

  virtual SyncStatus Status() const { return {}; }

  virtual std::string Describe() const = 0;
  // The gradient buckets, for the generation's first log line.
  std::string BucketSummary() const;
  // One log line on what synchronization cost over the process's life.
  virtual std::string TrafficSummary(const SyncTraffic& traffic) const = 0;

 protected:
  SyncStrategy(std::vector<torch::Tensor> params, Communicator* data, const SyncConfig& config);

  virtual absl::Status RestoreOuterState(const std::vector<torch::Tensor>& state) = 0;
  // State of the sync local to this rank (int8 error-feedback residuals):
  // kept in the rank's own in-memory commit like its inner optimizer state,
  // never sent to another rank nor checkpointed. Restoring an empty vector
  // zeroes it (a rank starting from another rank's state or a checkpoint).
  virtual std::vector<torch::Tensor> RankState() const { return {}; }
  virtual absl::Status RestoreRankState(const std::vector<torch::Tensor>&) { return absl::OkStatus(); }
  // Before a commit is captured: makes the optimizer state whole.
  virtual absl::Status GatherOptimizerState(torch::optim::Optimizer&) { return absl::OkStatus(); }

  // The gradient sync of a step, or null where it sums nothing.
  virtual GradientSync* StepGradients(bool local) const { return local ? nullptr : gradients_.get(); }
  // Update's first part: the gradient sync finished (timed into last_step_),
  // or nothing where the step syncs no gradients.
  absl::Status FinishGradients(bool local, int64_t step);
  // Update's second part (skip_nonfinite): whether every rank drops the
  // step; sets last_step_.skipped. A collective.
  absl::StatusOr<bool> AgreeToSkip(const UpdateInputs& in);
  // Counts bytes and wait into `traffic` and the step's cost: every count
  // goes through here.
  void Count(SyncTraffic* traffic, int64_t wire_bytes, double wait_seconds);
  // An all-reduce step's gradient bytes and wait.
  void CountAllReduceStep(SyncTraffic* traffic);
  // Names the step in a collective's error.
  static absl::Status AtStep(const absl::Status& s, const char* what, int64_t step);

  std::vector<torch::Tensor> params_;
  Communicator* data_;
  std::unique_ptr<GradientSync> gradients_;
  FusedOptimizerStep fused_;  // CUDA: the optimizer step as fused kernels
  SyncStepCost last_step_;
  std::vector<int> all_ranks_;  // 0..size-1
  std::vector<int> own_rank_;   // {rank}
};

// sync.islands_by: this rank's island and cross group, from the
// generation's communicators (worker/train/group_communicators.h).
struct IslandComms {
  const IslandLayout* layout = nullptr;
  Communicator* island = nullptr;
  Communicator* cross = nullptr;  // null where this rank's position owns no shard
};

// INVALID_ARGUMENT when the config cannot run on these parameters. With
// `islands` (sync.islands_by), mode average runs island rounds (island_sync.h).
absl::StatusOr<std::unique_ptr<SyncStrategy>> CreateSyncStrategy(const SyncConfig& config,
                                                                 std::vector<torch::Tensor> params,
                                                                 Communicator* data,
                                                                 const IslandComms* islands = nullptr);

}  // namespace herd
