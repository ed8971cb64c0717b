#include "worker/train/training_context.h"

#include <torch/cuda.h>
#include <torch/utils.h>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "worker/train/generation/liveness.h"
#include "worker/train/optim/optimizer_factory.h"
#include "worker/train/sync/replicas.h"

namespace herd {
namespace {

torch::Device DeviceOf(const TrainerOptions& options) {
  return options.device == "cuda" ? torch::Device(torch::kCUDA, std::max(0, options.gpu)) : torch::Device(torch::kCPU);
}

absl::Status CheckCudaDevice(const torch::Device& device) {
  if (!device.is_cuda()) return absl::OkStatus();
  if (!torch::cuda::is_available()) {
    return absl::UnimplementedError(
        "device cuda: this trainer's LibTorch has no usable CUDA (build with HERD_LIBTORCH pointing at a CUDA "
        "LibTorch, see worker/comm/README.md) or the machine has no GPU");
  }
  if (device.index() >= static_cast<int>(torch::cuda::device_count())) {
    return absl::InvalidArgumentError(absl::StrCat("device cuda: GPU ", device.index(), " does not exist (",
                                                   torch::cuda::device_count(), " visible)"));
  }
  return absl::OkStatus();
}

CheckpointKeeperOptions KeeperOptions(const v1::JobSpec& spec, const TrainerOptions& options, TrainerMetrics* metrics,
                                      ProgressReporter* reporter) {
  CheckpointKeeperOptions keeper;
  keeper.root = options.checkpoint_root;
  keeper.job_id = options.job_id;
  keeper.optimizer = spec.optimizer();
  keeper.interval_steps = spec.checkpoint().interval_steps();
  keeper.fail_on_error = spec.checkpoint().on_failure() == v1::ON_FAILURE_FAIL;
  if (reporter != nullptr) {
    keeper.sinks.record = [reporter](v1::CommitCheckpointRequest record) {
      reporter->PostCheckpoint(std::move(record));
    };
  }
  if (metrics != nullptr) {
    keeper.sinks.failed = [metrics] { metrics->ObserveCheckpointFailure(); };
    keeper.sinks.written = [metrics](double unix_seconds) { metrics->SetLastCheckpoint(unix_seconds); };
  }
  keeper.before_write = options.checkpoint_before_write;
  return keeper;
}

}  // namespace

TrainingContext::TrainingContext(const v1::JobSpec& spec, int64_t seed, TrainerOptions options, SyncConfig sync,
                                 NonFinitePolicy on_nonfinite, TrainerMetrics* metrics, SampleLedger* ledger,
                                 ProgressReporter* reporter)
    : spec_(spec),
      seed_(seed),
      options_(std::move(options)),
      device_(DeviceOf(options_)),
      sync_(std::move(sync)),
      on_nonfinite_(on_nonfinite),
      metrics_(metrics),
      ledger_(ledger),
      reporter_(reporter),
      checkpoints_(std::make_unique<CheckpointKeeper>(KeeperOptions(spec_, options_, metrics, reporter))) {}

std::chrono::milliseconds TrainingContext::CollectiveTimeout() const {
  if (options_.collective_timeout.count() > 0) return options_.collective_timeout;
  return std::chrono::milliseconds(static_cast<int64_t>(spec_.collective_timeout_seconds() * 1000));
}

absl::StatusOr<std::unique_ptr<TrainingContext>> TrainingContext::Create(const v1::JobSpec& spec, int64_t seed,
                                                                         TrainerOptions options,
                                                                         TrainerMetrics* metrics, SampleLedger* ledger,
                                                                         ProgressReporter* reporter) {
  const auto start = std::chrono::steady_clock::now();
  auto sync = ParseSyncConfig(spec.sync());
  if (!sync.ok()) return sync.status();
  const NonFinitePolicy on_nonfinite =
      spec.on_nonfinite() == v1::ON_NONFINITE_SKIP_STEP ? NonFinitePolicy::kSkipStep : NonFinitePolicy::kFail;
  std::unique_ptr<TrainingContext> context(new TrainingContext(spec, seed, std::move(options), *std::move(sync),
                                                               on_nonfinite, metrics, ledger, reporter));
  MarkAlive();
  if (auto s = CheckCudaDevice(context->device_); !s.ok()) return s;
  if (auto s = context->Build(); !s.ok()) return s;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (metrics != nullptr) metrics->ObserveContextLoad(seconds);
  LOG(INFO) << "job context loaded in " << seconds << " s: " << context->train_->size() << " training samples, "
            << spec.model().name() << " with " << FlattenParameters(context->params_).numel()
            << " parameters (kept across generations)";
  return context;
}

absl::Status TrainingContext::Build() {
  // Building data and model computes too (a synthetic set's labels are a matmul).
  std::unique_lock<std::mutex> compute;
  if (options_.compute_mutex != nullptr) compute = std::unique_lock<std::mutex>(*options_.compute_mutex);
  torch::set_num_threads(static_cast<int>(spec_.threads()));
  auto train = LoadDataset(spec_.dataset(), /*train=*/true, seed_);
  if (!train.ok()) return train.status();
  train_ = std::move(*train);
  auto eval = LoadDataset(spec_.dataset(), /*train=*/false, seed_);
  if (!eval.ok()) return eval.status();
  eval_ = std::move(*eval);
  if (train_->size() == 0) return absl::InvalidArgumentError("dataset: the training set is empty");

  auto model = CreateModel(spec_.model(), ModelInputInfo{train_->sample_shape(), train_->num_classes()}, seed_);
  if (!model.ok()) return model.status();
  model_ = std::move(*model);
  model_->To(device_);
  model_->SetTraining(true);
  params_ = model_->Parameters();
  auto optimizer = MakeOptimizer(spec_.optimizer(), params_);
  if (!optimizer.ok()) return optimizer.status();
  optimizer_ = std::move(*optimizer);
  sampler_ = std::make_unique<EpochSampler>(train_->size(), seed_);
  committed_.snapshot = StateSnapshot(/*on_host=*/device_.is_cuda());
  if (options_.prefetch_batches.value_or(device_.is_cuda())) {
    prefetcher_ = std::make_unique<BatchPrefetcher>(train_.get(), /*pin=*/device_.is_cuda(), device_);
  }
  progress_ = std::make_unique<ProgressBook>(device_, on_nonfinite_, metrics_);
  return absl::OkStatus();
}

}  // namespace herd
