// A trainer process's job context: everything that must outlive a change of
// membership, built once per process. The job's inputs, the data, model and
// optimizer, the training position, the last commit held in memory, and the
// owners of what spans generations: the progress book (report/), the
// checkpoint keeper (checkpoint/), sync traffic and host reads. A generation
// (trainer.h, generation_manager.h) only adds its communicators and sync on
// top, so re-forming a generation never reloads data or rebuilds the model.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"
#include "worker/contract/trainer_contract.h"
#include "worker/data/dataset.h"
#include "worker/models/model.h"
#include "worker/train/batches/batch_prefetcher.h"
#include "worker/train/step/host_reads.h"
#include "worker/train/report/progress_reporter.h"
#include "worker/train/batches/sample_ledger.h"
#include "worker/train/batches/sampler.h"
#include "worker/train/checkpoint/state_snapshot.h"
#include "worker/train/sync/sync_config.h"
#include "worker/train/sync/sync_traffic.h"
#include "worker/train/report/trainer_metrics.h"
#include "worker/train/checkpoint/training_state.h"
#include "worker/train/checkpoint/checkpoint_keeper.h"
#include "worker/train/report/progress_book.h"

namespace herd {

struct TrainerOptions {
  std::string job_id;
  std::string work_dir;
  std::string device = "cpu";
  int gpu = -1;
  // 0: the job spec's collective_timeout_seconds.
  std::chrono::milliseconds collective_timeout{0};
  // Root of the checkpoint storage (shared by all workers of a cluster).
  std::string checkpoint_root;
  // Tests running ranks as threads of one process: held around everything
  // that calls BLAS (building the data and model, forward, backward), because
  // Debian's serial OpenBLAS is not safe to call from two threads at once.
  // Null in a real trainer (one rank per process).
  std::mutex* compute_mutex = nullptr;
  // Which ranks of which generation are asked to leave the job at its next
  // step boundary (release_vote.h; generation 0: none); read at every commit
  // point, so it must be cheap. Unset: never, and no vote is taken, so every
  // rank of a job must set it or none (herd-trainer always does).
  std::function<LeaveRequest()> leave_request;
  // The generation this trainer's job is asked to re-form after, at its next
  // step boundary (0: none); read at the same commit points, set together
  // with leave_request.
  std::function<int64_t()> reform_requested_generation;
  // Tests: runs on the checkpoint writer's thread before each write
  // (checkpoint_writer.h), to hold a write in flight.
  std::function<void(int64_t step)> checkpoint_before_write;
  // Whether the next step's batches are gathered on a thread of their own
  // (batch_prefetcher.h). Unset: on CUDA devices only, where the gather is
  // host work the GPU would wait for; a CPU trainer's cores train instead.
  std::optional<bool> prefetch_batches;
};

// The job's inputs (set once), what training built and keeps, and the
// owners of state that spans generations, each behind a method.
class TrainingContext {
 public:
  // Loads the datasets and builds the model and optimizer for `spec`.
  // `metrics`, `ledger` and `reporter` may be null and must outlive the context.
  static absl::StatusOr<std::unique_ptr<TrainingContext>> Create(const v1::JobSpec& spec, int64_t seed,
                                                                 TrainerOptions options, TrainerMetrics* metrics,
                                                                 SampleLedger* ledger, ProgressReporter* reporter);

  // The job's inputs.
  const v1::JobSpec& spec() const { return spec_; }
  int64_t seed() const { return seed_; }
  const TrainerOptions& options() const { return options_; }
  const torch::Device& device() const { return device_; }
  const SyncConfig& sync() const { return sync_; }  // the spec's sync.* settings, typed
  NonFinitePolicy on_nonfinite() const { return on_nonfinite_; }
  TrainerMetrics* metrics() const { return metrics_; }
  SampleLedger* ledger() const { return ledger_; }
  ProgressReporter* reporter() const { return reporter_; }
  // Every collective's timeout: the option's, else the spec's.
  std::chrono::milliseconds CollectiveTimeout() const;

  // Built once per process.
  const Dataset& train_set() const { return *train_; }
  const Dataset& eval_set() const { return *eval_; }
  Model* model() const { return model_.get(); }
  const std::vector<torch::Tensor>& params() const { return params_; }
  torch::optim::Optimizer* optimizer() const { return optimizer_.get(); }
  const EpochSampler& sampler() const { return *sampler_; }
  // Null where batches are gathered in the step (TrainerOptions::prefetch_batches).
  BatchPrefetcher* prefetcher() const { return prefetcher_.get(); }

  // Where the last step left training.
  TrainingPosition& position() { return position_; }
  const TrainingPosition& position() const { return position_; }
  // The last commit, what the next generation heals from.
  CommittedState& committed() { return committed_; }
  // Synchronization and samples over the process's life (all generations).
  SyncTraffic& traffic() { return traffic_; }
  // Every read of a device value to the host goes through here.
  HostReads& host_reads() { return host_reads_; }
  // The next progress report, the last one posted and their warnings.
  ProgressBook& progress() { return *progress_; }
  const ProgressBook& progress() const { return *progress_; }
  // Checkpoint writes and restores, across generations; the process waits
  // for its writes before it exits.
  CheckpointKeeper& checkpoints() { return *checkpoints_; }

 private:
  TrainingContext(const v1::JobSpec& spec, int64_t seed, TrainerOptions options, SyncConfig sync,
                  NonFinitePolicy on_nonfinite, TrainerMetrics* metrics, SampleLedger* ledger,
                  ProgressReporter* reporter);
  absl::Status Build();

  const v1::JobSpec spec_;
  const int64_t seed_;
  const TrainerOptions options_;
  const torch::Device device_;
  const SyncConfig sync_;
  const NonFinitePolicy on_nonfinite_;
  TrainerMetrics* const metrics_;
  SampleLedger* const ledger_;
  ProgressReporter* const reporter_;

  std::unique_ptr<Dataset> train_;
  std::unique_ptr<Dataset> eval_;
  std::unique_ptr<Model> model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<EpochSampler> sampler_;
  // After `train_`, which it reads: destroyed first.
  std::unique_ptr<BatchPrefetcher> prefetcher_;

  TrainingPosition position_;
  CommittedState committed_;
  SyncTraffic traffic_;
  HostReads host_reads_;
  std::unique_ptr<ProgressBook> progress_;
  // After the model and optimizer it copies from: destroyed first.
  std::unique_ptr<CheckpointKeeper> checkpoints_;
};

}  // namespace herd
