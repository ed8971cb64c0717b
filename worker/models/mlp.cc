// mlp: flatten -> 1024 -> ReLU -> 1024 -> ReLU -> classes by default
// (model.hidden sizes it). The same layers and parameter names (net.1.weight,
// ...) as the MLP of the PyTorch DDP baseline (shared/bench/ddp_baseline.py),
// so the comparison is like for like.
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/models/builtin_models.h"

namespace herd {
namespace {

class Mlp : public LogitsModule {
 public:
  Mlp(int64_t in_features, const std::vector<int64_t>& hidden, int64_t classes) {
    torch::nn::Sequential net{torch::nn::Flatten()};
    int64_t width = in_features;
    for (int64_t next : hidden) {
      net->push_back(torch::nn::Linear(width, next));
      net->push_back(torch::nn::ReLU());
      width = next;
    }
    net->push_back(torch::nn::Linear(width, classes));
    net_ = register_module("net", net);
    config_ = absl::StrCat("{\"hidden\": [", absl::StrJoin(hidden, ", "), "]}");
  }

  std::string Config() const override { return config_; }

  torch::Tensor forward(const torch::Tensor& inputs) override { return net_->forward(inputs); }

 private:
  torch::nn::Sequential net_{nullptr};
  std::string config_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<LogitsModule>> MakeMlp(const v1::ModelSpec& spec, const ModelInputInfo& info) {
  int64_t in_features = 1;
  for (int64_t d : info.sample_shape) in_features *= d;
  std::vector<int64_t> hidden(spec.hidden().begin(), spec.hidden().end());
  if (hidden.empty()) hidden = {1024, 1024};
  return std::make_shared<Mlp>(in_features, hidden, info.num_classes);
}

}  // namespace herd
