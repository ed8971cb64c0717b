#include "worker/models/module_model.h"

#include <algorithm>
#include <utility>

namespace herd {

Model::~Model() = default;

std::vector<torch::Tensor> Model::Buffers() {
  std::vector<torch::Tensor> buffers;
  for (auto& named : NamedBuffers()) buffers.push_back(std::move(named.second));
  return buffers;
}

torch::Tensor MeanCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  const int64_t classes = logits.size(-1);
  const torch::Tensor flat_targets = targets.reshape({-1});
  // Sum then divide so that an empty batch yields 0 instead of 0/0.
  const torch::Tensor total =
      at::cross_entropy_loss(logits.reshape({-1, classes}), flat_targets, {}, at::Reduction::Sum);
  return total / static_cast<double>(std::max<int64_t>(flat_targets.numel(), 1));
}

ModuleModel::ModuleModel(std::string name, std::shared_ptr<LogitsModule> module)
    : name_(std::move(name)), module_(std::move(module)) {}

std::vector<torch::Tensor> ModuleModel::Parameters() { return module_->parameters(); }

std::vector<std::pair<std::string, torch::Tensor>> ModuleModel::NamedParameters() {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : module_->named_parameters()) named.emplace_back(item.key(), item.value());
  return named;
}

std::vector<std::pair<std::string, torch::Tensor>> ModuleModel::NamedBuffers() {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : module_->named_buffers()) named.emplace_back(item.key(), item.value());
  return named;
}

ModelOutput ModuleModel::Forward(const Batch& batch) {
  ModelOutput out;
  out.logits = module_->forward(batch.inputs.to(device_));
  out.loss = MeanCrossEntropy(out.logits, batch.targets.to(device_));
  return out;
}

void ModuleModel::SetTraining(bool training) { module_->train(training); }

void ModuleModel::To(const torch::Device& device) {
  module_->to(device);
  device_ = device;
}

}  // namespace herd
