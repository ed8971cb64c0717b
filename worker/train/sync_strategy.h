// How a generation keeps its replicas in agreement, chosen once per
// generation from the typed sync config (sync_config.h):
//   all-reduce: every step's gradients are summed (gradient_sync.h);
//   average:    after warmup steps of all-reduce, ranks step locally and a
//               round averages the parameters every `every` steps and
//               wherever replicas must agree (parameter_averaging.h).
//               Streaming (sync.fragments > 1 or sync.overlap): fragment f
//               of F is averaged at local steps s with
//               s % every == ((f+1) * every / F) % every, counted from the
//               last full sync; with overlap its result is merged after the
//               next step. Replicas then agree only at full syncs: all
//               fragments averaged at once, blocking, with no round in
//               flight, at epoch ends, evaluations, checkpoint steps, the
//               last step and once log_interval_steps * every steps have
//               passed since the last commit. Commits fall only there, so
//               no commit holds a round in flight or per-fragment anchors
//               (they equal the parameters).
// The trainer asks the strategy, never the mode, whether a step is local,
// when a round runs and where commits may fall.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/train/gradient_sync.h"
#include "worker/train/sync_config.h"
#include "worker/train/sync_traffic.h"

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
};

class SyncStrategy {
 public:
  virtual ~SyncStrategy();

  // Whether the step after `steps_done` steps trains without gradient sync.
  virtual bool LocalStep(int64_t steps_done) const = 0;
  // The gradient all-reduce of non-local steps (both modes).
  GradientSync& gradients() { return *gradients_; }

  // After the optimizer update of a step: counts its traffic into `traffic`
  // and, in mode average, runs a round when one is due (a collective: every
  // rank calls it at the same boundary). The error names the step.
  virtual absl::Status AfterStep(bool local, const StepBoundary& at, SyncTraffic* traffic) = 0;
  // Whether a commit point falls here: replicas identical, and the log
  // interval since `last_commit_step` reached (or a checkpoint step, or done).
  virtual bool CommitDue(const StepBoundary& at, int64_t last_commit_step, int64_t log_interval) const = 0;

  // Training (re)starts from parameters identical on every rank (healed,
  // restored or broadcast).
  virtual void StartFromCurrentParameters() = 0;
  // Optimizer state of the sync itself (the outer momentum), for commits and
  // checkpoints; empty when there is none.
  virtual std::vector<torch::Tensor> OuterState() const = 0;
  virtual absl::Status RestoreOuterState(const std::vector<torch::Tensor>& state) = 0;
  // State of the sync local to this rank (int8 error-feedback residuals):
  // kept in the rank's own in-memory commit like its inner optimizer state,
  // never sent to another rank nor checkpointed. Restoring an empty vector
  // zeroes it (a rank starting from another rank's state or a checkpoint).
  virtual std::vector<torch::Tensor> RankState() const { return {}; }
  virtual absl::Status RestoreRankState(const std::vector<torch::Tensor>&) { return absl::OkStatus(); }

  virtual std::string Describe() const = 0;
  // One log line on what synchronization cost over the process's life.
  virtual std::string TrafficSummary(const SyncTraffic& traffic) const = 0;

 protected:
  SyncStrategy(std::vector<torch::Tensor> params, Communicator* data, const SyncConfig& config);
  // Counts an all-reduce step's bytes and wait.
  void CountAllReduceStep(SyncTraffic* traffic) const;

  std::unique_ptr<GradientSync> gradients_;
};

// INVALID_ARGUMENT when the config cannot run on these parameters.
absl::StatusOr<std::unique_ptr<SyncStrategy>> CreateSyncStrategy(const SyncConfig& config,
                                                                 std::vector<torch::Tensor> params,
                                                                 Communicator* data);

}  // namespace herd
