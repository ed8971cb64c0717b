// resnet_small: a small ResNet for CxHxW images (1x28x28 Fashion-MNIST,
// 3x32x32 CIFAR-like): a 3x3 stem, three stages of two basic blocks (widths
// 16/32/64, the last two stages downsample by 2), global average pooling, fc.
//
// model.norm picks the normalization:
// - group (default): GroupNorm normalizes each sample on its own: no
//   buffers, and "W workers x batch b == 1 worker x batch W*b" holds.
// - batch: BatchNorm2d over each rank's own batch. Statistics depend on the
//   per-rank batch, so the equivalence does not hold; the running statistics
//   are buffers that the trainer makes identical at commit points.
// - sync_batch: batch norm over all ranks' batches (sync_batch_norm.h): the
//   equivalence holds, and the running statistics agree by construction.
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/models/builtin_models.h"
#include "worker/models/sync_batch_norm.h"

namespace herd {
namespace {

constexpr int64_t kGroups = 8;  // divides every width below

torch::nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

enum class NormKind { kGroup, kBatch, kSyncBatch };

const char* NormName(NormKind kind) {
  switch (kind) {
    case NormKind::kBatch: return "batch";
    case NormKind::kSyncBatch: return "sync_batch";
    case NormKind::kGroup: break;
  }
  return "group";
}

// A normalization layer of the chosen kind, registered under `name`.
torch::nn::AnyModule RegisterNorm(torch::nn::Module& parent, const std::string& name, NormKind kind,
                                  int64_t channels) {
  switch (kind) {
    case NormKind::kBatch:
      return torch::nn::AnyModule(parent.register_module(name, torch::nn::BatchNorm2d(channels)));
    case NormKind::kSyncBatch:
      return torch::nn::AnyModule(parent.register_module(name, std::make_shared<SyncBatchNorm2d>(channels)));
    case NormKind::kGroup:
      break;
  }
  return torch::nn::AnyModule(
      parent.register_module(name, torch::nn::GroupNorm(torch::nn::GroupNormOptions(kGroups, channels))));
}

class BasicBlock : public torch::nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, NormKind norm) {
    conv1_ = register_module("conv1", Conv(in, out, 3, stride));
    norm1_ = RegisterNorm(*this, "norm1", norm, out);
    conv2_ = register_module("conv2", Conv(out, out, 3, 1));
    norm2_ = RegisterNorm(*this, "norm2", norm, out);
    if (stride != 1 || in != out) {
      shortcut_conv_ = register_module("shortcut_conv", Conv(in, out, 1, stride));
      shortcut_norm_ = RegisterNorm(*this, "shortcut_norm", norm, out);
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = at::relu(norm1_.forward(conv1_->forward(x)));
    y = norm2_.forward(conv2_->forward(y));
    const torch::Tensor skip = shortcut_conv_ ? shortcut_norm_.forward(shortcut_conv_->forward(x)) : x;
    return at::relu(y + skip);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, shortcut_conv_{nullptr};
  torch::nn::AnyModule norm1_, norm2_, shortcut_norm_;
};

class ResnetSmall : public LogitsModule {
 public:
  // Two blocks per stage; stages after the first halve the resolution.
  ResnetSmall(int64_t in_channels, const std::vector<int64_t>& widths, int64_t classes, NormKind norm) {
    stem_conv_ = register_module("stem_conv", Conv(in_channels, widths[0], 3, 1));
    stem_norm_ = RegisterNorm(*this, "stem_norm", norm, widths[0]);
    int64_t width = widths[0];
    for (size_t stage = 0; stage < widths.size(); ++stage) {
      for (int block = 0; block < 2; ++block) {
        const int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
        blocks_.push_back(register_module(absl::StrCat("stage", stage + 1, "_block", block + 1),
                                          std::make_shared<BasicBlock>(width, widths[stage], stride, norm)));
        width = widths[stage];
      }
    }
    fc_ = register_module("fc", torch::nn::Linear(width, classes));
    config_ = absl::StrCat("{\"widths\": [", absl::StrJoin(widths, ", "), "], \"norm\": \"", NormName(norm), "\"}");
  }

  std::string Config() const override { return config_; }

  torch::Tensor forward(const torch::Tensor& inputs) override {
    torch::Tensor x = at::relu(stem_norm_.forward(stem_conv_->forward(inputs)));
    for (const auto& block : blocks_) x = block->forward(x);
    return fc_->forward(x.mean({2, 3}));
  }

  bool SetReplicaSum(ReplicaSum* sum) override {
    bool uses = false;
    for (const auto& module : modules()) {
      if (auto* norm = module->as<SyncBatchNorm2d>()) {
        norm->set_replica_sum(sum);
        uses = true;
      }
    }
    return uses;
  }

 private:
  torch::nn::Conv2d stem_conv_{nullptr};
  torch::nn::AnyModule stem_norm_;
  std::vector<std::shared_ptr<BasicBlock>> blocks_;
  torch::nn::Linear fc_{nullptr};
  std::string config_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<LogitsModule>> MakeResnetSmall(const v1::ModelSpec& spec, const ModelInputInfo& info) {
  if (info.sample_shape.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("model.name resnet_small needs CxHxW images; the dataset gives ",
                                                   ShapeString(info.sample_shape)));
  }
  NormKind norm = NormKind::kGroup;
  switch (spec.norm()) {
    case v1::NORM_UNSPECIFIED:
    case v1::NORM_GROUP:
      break;
    case v1::NORM_BATCH:
      norm = NormKind::kBatch;
      break;
    case v1::NORM_SYNC_BATCH:
      norm = NormKind::kSyncBatch;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("model.norm ", static_cast<int>(spec.norm()), ": expected group, batch or sync_batch"));
  }
  std::vector<int64_t> widths(spec.widths().begin(), spec.widths().end());
  if (widths.empty()) widths = {16, 32, 64};
  for (int64_t w : widths) {
    if (w <= 0 || w % kGroups != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.widths: ", w, " is not a positive multiple of ", kGroups, " (the group norm's groups)"));
    }
  }
  return std::make_shared<ResnetSmall>(info.sample_shape[0], widths, info.num_classes, norm);
}

}  // namespace herd
