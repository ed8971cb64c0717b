// char_transformer: a small decoder-only (GPT-style) language model over
// bytes, or over token ids with model.vocab_size / a tokens dataset. Token + learned position embeddings, 2 pre-LayerNorm blocks of
// causal multi-head self-attention (d_model 128, 4 heads) and a 4x GELU MLP,
// a final LayerNorm and a linear head to vocabulary logits [N, T, V].
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/models/builtin_models.h"

namespace herd {
namespace {

// The defaults; model.width, heads, layers and context override them.
constexpr int64_t kModelWidth = 128;
constexpr int64_t kHeads = 4;
constexpr int64_t kLayers = 2;

torch::nn::LayerNorm Norm(int64_t width) { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})); }

class CausalSelfAttention : public torch::nn::Module {
 public:
  CausalSelfAttention(int64_t width, int64_t heads) : width_(width), heads_(heads) {
    qkv_ = register_module("qkv", torch::nn::Linear(width, 3 * width));
    proj_ = register_module("proj", torch::nn::Linear(width, width));
  }

  // x [N, T, D]; `future` [T, T] is true where a position must not look.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& future) {
    const int64_t n = x.size(0), t = x.size(1), head_width = width_ / heads_;
    // [3, N, H, T, head_width]
    const torch::Tensor qkv = qkv_->forward(x).view({n, t, 3, heads_, head_width}).permute({2, 0, 3, 1, 4});
    const torch::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
    torch::Tensor scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_width));
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    const torch::Tensor mixed = at::softmax(scores, -1).matmul(v);  // [N, H, T, head_width]
    return proj_->forward(mixed.transpose(1, 2).reshape({n, t, width_}));
  }

 private:
  int64_t width_, heads_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};

class Block : public torch::nn::Module {
 public:
  Block(int64_t width, int64_t heads) {
    norm1_ = register_module("norm1", Norm(width));
    attention_ = register_module("attention", std::make_shared<CausalSelfAttention>(width, heads));
    norm2_ = register_module("norm2", Norm(width));
    fc1_ = register_module("fc1", torch::nn::Linear(width, 4 * width));
    fc2_ = register_module("fc2", torch::nn::Linear(4 * width, width));
  }

  torch::Tensor forward(torch::Tensor x, const torch::Tensor& future) {
    x = x + attention_->forward(norm1_->forward(x), future);
    return x + fc2_->forward(at::gelu(fc1_->forward(norm2_->forward(x))));
  }

 private:
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  std::shared_ptr<CausalSelfAttention> attention_;
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

class CharTransformer : public LogitsModule {
 public:
  CharTransformer(int64_t vocabulary, int64_t context, int64_t width, int64_t heads, int64_t layers)
      : context_(context),
        config_(absl::StrCat("{\"vocab_size\": ", vocabulary, ", \"context\": ", context, ", \"width\": ", width,
                             ", \"heads\": ", heads, ", \"layers\": ", layers, "}")) {
    tokens_ = register_module("token_embedding", torch::nn::Embedding(vocabulary, width));
    positions_ = register_module("position_embedding", torch::nn::Embedding(context, width));
    for (int64_t i = 0; i < layers; ++i) {
      blocks_.push_back(register_module(absl::StrCat("block", i + 1), std::make_shared<Block>(width, heads)));
    }
    final_norm_ = register_module("final_norm", Norm(width));
    head_ = register_module("head", torch::nn::Linear(width, vocabulary));
  }

  // tokens int64 [N, T] with T <= context.
  torch::Tensor forward(const torch::Tensor& tokens) override {
    const int64_t t = tokens.size(1);
    TORCH_CHECK(t <= context_, "char_transformer: sequence of ", t, " tokens exceeds the context of ", context_);
    const auto on = tokens.options();
    torch::Tensor x = tokens_->forward(tokens) + positions_->forward(at::arange(t, on.dtype(at::kLong)));
    const torch::Tensor future = at::ones({t, t}, on.dtype(at::kBool)).triu(1);
    for (const auto& block : blocks_) x = block->forward(x, future);
    return head_->forward(final_norm_->forward(x));
  }

  std::string Config() const override { return config_; }

 private:
  int64_t context_;
  std::string config_;
  torch::nn::Embedding tokens_{nullptr}, positions_{nullptr};
  std::vector<std::shared_ptr<Block>> blocks_;
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

absl::StatusOr<std::shared_ptr<LogitsModule>> MakeCharTransformer(const v1::ModelSpec& spec,
                                                                  const ModelInputInfo& info) {
  if (info.sample_shape.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.name char_transformer needs token sequences (sample shape {T}); the dataset gives ",
                     ShapeString(info.sample_shape)));
  }
  if (info.num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.name char_transformer needs a vocabulary of at least 2, got ", info.num_classes));
  }
  const int64_t width = spec.width() > 0 ? spec.width() : kModelWidth;
  const int64_t heads = spec.heads() > 0 ? spec.heads() : kHeads;
  const int64_t layers = spec.layers() > 0 ? spec.layers() : kLayers;
  const int64_t context = spec.context() > 0 ? spec.context() : info.sample_shape[0];
  if (width % heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model.heads: ", heads, " does not divide model.width ", width));
  }
  if (context < info.sample_shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat("model.context: ", context, " is shorter than the dataset's ",
                                                   info.sample_shape[0], "-token samples"));
  }
  // A larger table than the data needs is allowed (nanoGPT pads 50257 to 50304).
  const int64_t vocabulary = spec.vocab_size() > 0 ? spec.vocab_size() : info.num_classes;
  if (vocabulary < info.num_classes) {
    return absl::InvalidArgumentError(absl::StrCat("model.vocab_size: ", vocabulary,
                                                   " is smaller than the dataset's vocabulary of ", info.num_classes));
  }
  return std::make_shared<CharTransformer>(vocabulary, context, width, heads, layers);
}

}  // namespace herd
