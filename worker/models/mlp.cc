// mlp: flatten -> 1024 -> ReLU -> 1024 -> ReLU -> classes. The same layers
// and parameter names (net.1.weight, ...) as the MLP of the PyTorch DDP
// baseline (shared/bench/ddp_baseline.py), so the comparison is like for like.
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "absl/strings/str_cat.h"
#include "worker/models/builtin_models.h"

namespace herd {
namespace {

constexpr int64_t kHidden = 1024;

class Mlp : public LogitsModule {
 public:
  Mlp(int64_t in_features, int64_t classes) {
    net_ = register_module(
        "net", torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(in_features, kHidden),
                                     torch::nn::ReLU(), torch::nn::Linear(kHidden, kHidden), torch::nn::ReLU(),
                                     torch::nn::Linear(kHidden, classes)));
  }

  torch::Tensor forward(const torch::Tensor& inputs) override { return net_->forward(inputs); }

 private:
  torch::nn::Sequential net_{nullptr};
};

}  // namespace

absl::StatusOr<std::shared_ptr<LogitsModule>> MakeMlp(const ModelInputInfo& info) {
  int64_t in_features = 1;
  for (int64_t d : info.sample_shape) in_features *= d;
  return std::make_shared<Mlp>(in_features, info.num_classes);
}

}  // namespace herd
