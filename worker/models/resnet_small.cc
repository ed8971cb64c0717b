// resnet_small: a small ResNet for CxHxW images (1x28x28 Fashion-MNIST,
// 3x32x32 CIFAR-like): a 3x3 stem, three stages of two basic blocks (widths
// 16/32/64, the last two stages downsample by 2), global average pooling, fc.
//
// GroupNorm instead of BatchNorm: BatchNorm's running statistics are buffers
// that each replica would update from its own batch, so replicas would drift
// apart without an extra buffer synchronization, and its batch statistics
// depend on the per-rank batch, which breaks "W workers x batch b == 1 worker
// x batch W*b". GroupNorm normalizes each sample on its own: no buffers, and
// the equivalence holds.
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/models/builtin_models.h"

namespace herd {
namespace {

constexpr int64_t kGroups = 8;  // divides every width below

torch::nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

torch::nn::GroupNorm Norm(int64_t channels) {
  return torch::nn::GroupNorm(torch::nn::GroupNormOptions(kGroups, channels));
}

class BasicBlock : public torch::nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    conv1_ = register_module("conv1", Conv(in, out, 3, stride));
    norm1_ = register_module("norm1", Norm(out));
    conv2_ = register_module("conv2", Conv(out, out, 3, 1));
    norm2_ = register_module("norm2", Norm(out));
    if (stride != 1 || in != out) {
      shortcut_conv_ = register_module("shortcut_conv", Conv(in, out, 1, stride));
      shortcut_norm_ = register_module("shortcut_norm", Norm(out));
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = at::relu(norm1_->forward(conv1_->forward(x)));
    y = norm2_->forward(conv2_->forward(y));
    const torch::Tensor skip = shortcut_conv_ ? shortcut_norm_->forward(shortcut_conv_->forward(x)) : x;
    return at::relu(y + skip);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, shortcut_conv_{nullptr};
  torch::nn::GroupNorm norm1_{nullptr}, norm2_{nullptr}, shortcut_norm_{nullptr};
};

class ResnetSmall : public LogitsModule {
 public:
  // Two blocks per stage; stages after the first halve the resolution.
  ResnetSmall(int64_t in_channels, const std::vector<int64_t>& widths, int64_t classes) {
    stem_conv_ = register_module("stem_conv", Conv(in_channels, widths[0], 3, 1));
    stem_norm_ = register_module("stem_norm", Norm(widths[0]));
    int64_t width = widths[0];
    for (size_t stage = 0; stage < widths.size(); ++stage) {
      for (int block = 0; block < 2; ++block) {
        const int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
        blocks_.push_back(register_module(absl::StrCat("stage", stage + 1, "_block", block + 1),
                                          std::make_shared<BasicBlock>(width, widths[stage], stride)));
        width = widths[stage];
      }
    }
    fc_ = register_module("fc", torch::nn::Linear(width, classes));
  }

  torch::Tensor forward(const torch::Tensor& inputs) override {
    torch::Tensor x = at::relu(stem_norm_->forward(stem_conv_->forward(inputs)));
    for (const auto& block : blocks_) x = block->forward(x);
    return fc_->forward(x.mean({2, 3}));
  }

 private:
  torch::nn::Conv2d stem_conv_{nullptr};
  torch::nn::GroupNorm stem_norm_{nullptr};
  std::vector<std::shared_ptr<BasicBlock>> blocks_;
  torch::nn::Linear fc_{nullptr};
};

}  // namespace

absl::StatusOr<std::shared_ptr<LogitsModule>> MakeResnetSmall(const v1::ModelSpec& spec, const ModelInputInfo& info) {
  if (info.sample_shape.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("model.name resnet_small needs CxHxW images; the dataset gives ",
                                                   ShapeString(info.sample_shape)));
  }
  std::vector<int64_t> widths(spec.widths().begin(), spec.widths().end());
  if (widths.empty()) widths = {16, 32, 64};
  for (int64_t w : widths) {
    if (w <= 0 || w % kGroups != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.widths: ", w, " is not a positive multiple of ", kGroups, " (the group norm's groups)"));
    }
  }
  return std::make_shared<ResnetSmall>(info.sample_shape[0], widths, info.num_classes);
}

}  // namespace herd
