#include "worker/train/step/evaluator.h"

#include <algorithm>

namespace herd {

absl::StatusOr<std::map<std::string, double>> Evaluate(Model* model, const Dataset& dataset, Communicator* comm,
                                                       const EvalOptions& options) {
  const int64_t total = options.max_samples > 0 ? std::min(options.max_samples, dataset.size()) : dataset.size();
  const int world = comm->size();
  // sums[0] = loss * count, sums[1] = correct predictions, sums[2] = predictions
  double sums[3] = {0, 0, 0};
  {
    torch::NoGradGuard no_grad;
    model->SetTraining(false);
    std::vector<int64_t> indices;
    for (int64_t start = comm->rank(); start < total; start += world * options.batch_size) {
      indices.clear();
      for (int64_t i = start; i < total && static_cast<int64_t>(indices.size()) < options.batch_size; i += world) {
        indices.push_back(i);
      }
      Batch batch = dataset.Get(indices);
      std::unique_lock<std::mutex> compute;
      if (options.compute_mutex != nullptr) compute = std::unique_lock<std::mutex>(*options.compute_mutex);
      ModelOutput out = model->Forward(batch);
      const double n = static_cast<double>(indices.size());
      sums[0] += out.loss.item<double>() * n;
      if (out.logits.defined()) {
        torch::Tensor predicted = out.logits.argmax(-1);
        sums[1] += predicted.eq(batch.targets.to(predicted.device())).sum().item<double>();
        sums[2] += static_cast<double>(batch.targets.numel());
      }
    }
    model->SetTraining(true);
  }
  absl::Status status = comm->AllReduce(sums, 3, DataType::kFloat64);
  if (!status.ok()) return status;
  std::map<std::string, double> metrics;
  // The shards partition [0, total), so the loss mean divides by total.
  if (total > 0) metrics["loss"] = sums[0] / static_cast<double>(total);
  if (sums[2] > 0) metrics["accuracy"] = sums[1] / sums[2];
  return metrics;
}

}  // namespace herd
