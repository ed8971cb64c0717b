#include "worker/models/deterministic_init.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "worker/models/sync_batch_norm.h"

namespace herd {
namespace {

// LibTorch's default for Linear and Conv: weight kaiming_uniform(a=sqrt(5))
// and bias, both U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void FanInUniform(torch::Tensor& weight, torch::Tensor& bias, int64_t fan_in, at::Generator& rng) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  weight.uniform_(-bound, bound, rng);
  if (bias.defined()) bias.uniform_(-bound, bound, rng);
}

void OnesAndZeros(torch::Tensor& weight, torch::Tensor& bias) {
  if (weight.defined()) weight.fill_(1.0);
  if (bias.defined()) bias.zero_();
}

}  // namespace

absl::Status InitializeParameters(torch::nn::Module& root, uint64_t seed) {
  at::Generator rng = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  std::set<const void*> initialized;
  for (const auto& item : root.named_modules("", /*include_self=*/true)) {
    torch::nn::Module& module = *item.value();
    bool known = true;
    if (auto* linear = module.as<torch::nn::Linear>()) {
      FanInUniform(linear->weight, linear->bias, linear->weight.size(1), rng);
    } else if (auto* conv = module.as<torch::nn::Conv2d>()) {
      FanInUniform(conv->weight, conv->bias, conv->weight[0].numel(), rng);
    } else if (auto* embedding = module.as<torch::nn::Embedding>()) {
      embedding->weight.normal_(0.0, 1.0, rng);
    } else if (auto* layer_norm = module.as<torch::nn::LayerNorm>()) {
      OnesAndZeros(layer_norm->weight, layer_norm->bias);
    } else if (auto* group_norm = module.as<torch::nn::GroupNorm>()) {
      OnesAndZeros(group_norm->weight, group_norm->bias);
    } else if (auto* batch_norm = module.as<torch::nn::BatchNorm2d>()) {
      OnesAndZeros(batch_norm->weight, batch_norm->bias);
    } else if (auto* sync_batch_norm = module.as<SyncBatchNorm2d>()) {
      OnesAndZeros(sync_batch_norm->weight, sync_batch_norm->bias);
    } else {
      known = false;
    }
    if (known) {
      for (const auto& parameter : module.parameters(/*recurse=*/false)) {
        initialized.insert(parameter.unsafeGetTensorImpl());
      }
    }
  }
  for (const auto& parameter : root.named_parameters()) {
    if (initialized.count(parameter.value().unsafeGetTensorImpl()) == 0) {
      return absl::InternalError(
          absl::StrCat("parameter '", parameter.key(), "' has no deterministic initializer"));
    }
  }
  return absl::OkStatus();
}

}  // namespace herd
