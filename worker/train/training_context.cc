#include "worker/train/training_context.h"

#include <torch/cuda.h>
#include <torch/utils.h>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/train/checkpoint_files.h"
#include "worker/train/liveness.h"
#include "worker/train/optimizer_factory.h"
#include "worker/train/replicas.h"

namespace herd {

void ProgressWindow::Reset(const torch::Device& device, std::chrono::steady_clock::time_point now) {
  loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  loss_count = 0;
  nonfinite.Reset(device);
  samples = 0;
  compute_seconds = 0;
  wait_seconds = 0;
  steps = 0;
  start = now;
}

TrainingContext::TrainingContext(const v1::JobSpec& spec, int64_t seed, TrainerOptions options, SyncConfig sync,
                                 NonFinitePolicy on_nonfinite, TrainerMetrics* metrics, SampleLedger* ledger,
                                 ProgressReporter* reporter)
    : spec(spec),
      seed(seed),
      options(std::move(options)),
      device(this->options.device == "cuda" ? torch::Device(torch::kCUDA, std::max(0, this->options.gpu))
                                            : torch::Device(torch::kCPU)),
      sync(std::move(sync)),
      on_nonfinite(on_nonfinite),
      metrics(metrics),
      ledger(ledger),
      reporter(reporter) {}

std::chrono::milliseconds TrainingContext::CollectiveTimeout() const {
  if (options.collective_timeout.count() > 0) return options.collective_timeout;
  return std::chrono::milliseconds(static_cast<int64_t>(spec.collective_timeout_seconds() * 1000));
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
  if (context->device.is_cuda()) {
    if (!torch::cuda::is_available()) {
      return absl::UnimplementedError(
          "device cuda: this trainer's LibTorch has no usable CUDA (build with HERD_LIBTORCH pointing at a CUDA "
          "LibTorch, see worker/comm/README.md) or the machine has no GPU");
    }
    if (context->device.index() >= static_cast<int>(torch::cuda::device_count())) {
      return absl::InvalidArgumentError(absl::StrCat("device cuda: GPU ", context->device.index(),
                                                     " does not exist (", torch::cuda::device_count(), " visible)"));
    }
  }
  // Building data and model computes too (a synthetic set's labels are a matmul).
  std::unique_lock<std::mutex> compute;
  if (context->options.compute_mutex != nullptr) compute = std::unique_lock<std::mutex>(*context->options.compute_mutex);
  torch::set_num_threads(static_cast<int>(spec.threads()));
  auto train = LoadDataset(spec.dataset(), /*train=*/true, seed);
  if (!train.ok()) return train.status();
  context->train = std::move(*train);
  auto eval = LoadDataset(spec.dataset(), /*train=*/false, seed);
  if (!eval.ok()) return eval.status();
  context->eval = std::move(*eval);
  if (context->train->size() == 0) return absl::InvalidArgumentError("dataset: the training set is empty");

  auto model = CreateModel(spec.model(), ModelInputInfo{context->train->sample_shape(), context->train->num_classes()},
                           seed);
  if (!model.ok()) return model.status();
  context->model = std::move(*model);
  context->model->To(context->device);
  context->model->SetTraining(true);
  context->params = context->model->Parameters();
  auto optimizer = MakeOptimizer(spec.optimizer(), context->params);
  if (!optimizer.ok()) return optimizer.status();
  context->optimizer = std::move(*optimizer);
  context->sampler = std::make_unique<EpochSampler>(context->train->size(), seed);
  context->committed.snapshot = StateSnapshot(/*on_host=*/context->device.is_cuda());
  if (context->options.prefetch_batches.value_or(context->device.is_cuda())) {
    context->prefetcher = std::make_unique<BatchPrefetcher>(context->train.get(), /*pin=*/context->device.is_cuda(),
                                                            context->device);
  }
  context->window.Reset(context->device, std::chrono::steady_clock::now());

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (metrics != nullptr) metrics->ObserveContextLoad(seconds);
  LOG(INFO) << "job context loaded in " << seconds << " s: " << context->train->size() << " training samples, "
            << spec.model().name() << " with " << FlattenParameters(context->params).numel()
            << " parameters (kept across generations)";
  return context;
}

std::string TrainingContext::CheckpointWarning() const {
  std::vector<std::string> warnings;
  for (const std::string* w : {&checkpoint_warning, &restore_warning, &nonfinite_warning}) {
    if (!w->empty()) warnings.push_back(*w);
  }
  return absl::StrJoin(warnings, "; ");
}

}  // namespace herd
