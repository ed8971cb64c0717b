#include "worker/train/optim/optimizer_factory.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "absl/strings/str_cat.h"

namespace herd {

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(const v1::OptimizerSpec& spec,
                                                                      std::vector<torch::Tensor> params) {
  if (spec.name() == v1::OPTIMIZER_NAME_SGD) {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(spec.lr()).momentum(spec.momentum()).weight_decay(spec.weight_decay()));
  }
  if (spec.name() == v1::OPTIMIZER_NAME_ADAM) {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(spec.lr())
                                                            .betas({spec.beta1(), spec.beta2()})
                                                            .eps(spec.eps())
                                                            .weight_decay(spec.weight_decay()));
  }
  if (spec.name() == v1::OPTIMIZER_NAME_ADAMW) {
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(spec.lr())
                                                             .betas({spec.beta1(), spec.beta2()})
                                                             .eps(spec.eps())
                                                             .weight_decay(spec.weight_decay()));
  }
  return absl::InvalidArgumentError(absl::StrCat("optimizer.name: unknown optimizer ", static_cast<int>(spec.name())));
}

void SetLearningRate(torch::optim::Optimizer* optimizer, double lr) {
  for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
}

}  // namespace herd
