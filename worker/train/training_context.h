// A trainer process's job context: everything that must outlive a change of
// membership, built once per process. Dataset, model, optimizer, sampler
// position, the last commit held in memory, the sample ledger, the metrics
// and the progress reporter live here; a generation (worker/train/trainer.h)
// only adds its communicators and sync on top, so re-forming a generation
// never reloads data or rebuilds the model.
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
#include "worker/train/batch_prefetcher.h"
#include "worker/train/checkpoint_writer.h"
#include "worker/train/host_reads.h"
#include "worker/train/nonfinite_watch.h"
#include "worker/train/progress_reporter.h"
#include "worker/train/sample_ledger.h"
#include "worker/train/sampler.h"
#include "worker/train/state_snapshot.h"
#include "worker/train/sync_config.h"
#include "worker/train/sync_traffic.h"
#include "worker/train/trainer_metrics.h"
#include "worker/train/training_state.h"

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

// Since the last commit point: what the next progress report averages.
// Accumulated on the model's device, read only when a report is made
// (host_reads.h): the step loop never waits for the device.
struct ProgressWindow {
  // Restarts the window on `device` at `now`.
  void Reset(const torch::Device& device, std::chrono::steady_clock::time_point now);

  torch::Tensor loss_sum;  // float64 on the device: sum over samples of the loss
  int64_t loss_count = 0;  // samples in loss_sum
  NonFiniteWatch nonfinite;  // on_nonfinite: fail
  int64_t samples = 0;     // global samples trained in the window
  // This rank's step time in the window, split for straggler detection
  // (straggler.h): wait = the sync's wait to finish the gradient all-reduce
  // (SyncStepCost::wait_seconds), compute = the rest of each step's wall time.
  // Host clocks only: no device read.
  double compute_seconds = 0;
  double wait_seconds = 0;
  int64_t steps = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

// Three kinds of state, kept apart: the job's inputs (set once, const), the
// training position and what training built and keeps (model, optimizer,
// commit, traffic), and the progress window of the next report.
struct TrainingContext {
  // Loads the datasets and builds the model and optimizer for `spec`.
  // `metrics`, `ledger` and `reporter` may be null and must outlive the context.
  static absl::StatusOr<std::unique_ptr<TrainingContext>> Create(const v1::JobSpec& spec, int64_t seed,
                                                                 TrainerOptions options, TrainerMetrics* metrics,
                                                                 SampleLedger* ledger, ProgressReporter* reporter);

  // Every collective's timeout: the option's, else the spec's.
  std::chrono::milliseconds CollectiveTimeout() const;

  // The job's inputs.
  const v1::JobSpec spec;
  const int64_t seed;
  const TrainerOptions options;
  const torch::Device device;
  const SyncConfig sync;  // the spec's sync.* settings, parsed once (typed)
  const NonFinitePolicy on_nonfinite;
  TrainerMetrics* const metrics;
  SampleLedger* const ledger;
  ProgressReporter* const reporter;

  // Built once per process.
  std::unique_ptr<Dataset> train;
  std::unique_ptr<Dataset> eval;
  std::unique_ptr<Model> model;
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<EpochSampler> sampler;
  // Null where batches are gathered in the step (TrainerOptions::prefetch_batches).
  // After `train`, which it reads: destroyed first.
  std::unique_ptr<BatchPrefetcher> prefetcher;

  // Where the last step left training.
  TrainingPosition position;
  // The last commit, what the next generation heals from.
  CommittedState committed;
  int64_t last_checkpoint_step = -1;
  std::map<std::string, double> eval_metrics;
  // Synchronization and samples over the process's life (all generations).
  SyncTraffic traffic;
  int64_t global_samples = 0;  // samples of the whole job trained by steps this process took part in
  // Every read of a device value to the host goes through here.
  HostReads host_reads;

  // The progress window, and what the last report said.
  ProgressWindow window;
  double last_loss = 0;
  double learning_rate = 0;  // of the last step
  double samples_per_second = 0;
  // The last report posted: what a successful exit leaves as its final report.
  v1::ReportProgressRequest last_report;
  // The first checkpoint failure not yet reported (herd status shows it).
  std::string checkpoint_warning;
  // Set when training resumed from an older checkpoint than the newest
  // (corrupt, truncated): which one was skipped and why. Kept for the job's
  // life in this process.
  std::string restore_warning;
  // What progress reports carry as the job's warning: storage trouble, a
  // fallback to an older checkpoint and skipped non-finite steps alike.
  std::string CheckpointWarning() const;
  // Rank 0 writes checkpoints off the step loop (made at its first save);
  // the process waits for it before it exits.
  std::unique_ptr<CheckpointWriter> checkpoint_writer;
  // on_nonfinite: skip_step: steps dropped so far, and the warning saying so.
  int64_t nonfinite_steps_skipped = 0;
  std::string nonfinite_warning;

 private:
  TrainingContext(const v1::JobSpec& spec, int64_t seed, TrainerOptions options, SyncConfig sync,
                  NonFinitePolicy on_nonfinite, TrainerMetrics* metrics, SampleLedger* ledger,
                  ProgressReporter* reporter);
};

}  // namespace herd
