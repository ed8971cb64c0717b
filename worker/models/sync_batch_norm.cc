#include "worker/models/sync_batch_norm.h"

#include <ATen/Context.h>
#include <torch/autograd.h>

namespace herd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const std::vector<int64_t> kReduceDims = {0, 2, 3};  // all but channels

torch::Tensor PerChannel(const torch::Tensor& v) { return v.view({1, -1, 1, 1}); }

// y = (x - mean) * invstd * weight + bias, with mean and invstd taken over
// all ranks (computed by the caller, detached). Backward accounts for their
// dependence on x through two global sums per channel, as PyTorch's
// SyncBatchNorm does; weight and bias get this rank's share of their
// gradients (the gradient all-reduce sums the shares).
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& mean, const torch::Tensor& invstd,
                               const torch::Tensor& count, ReplicaSum* sum) {
    const torch::Tensor xf = x.to(torch::kFloat);
    ctx->save_for_backward({xf, weight, mean, invstd, count});
    ctx->saved_data["sum"] = reinterpret_cast<int64_t>(sum);
    ctx->saved_data["dtype"] = x.scalar_type();
    const torch::Tensor scale = invstd * weight;
    return ((xf - PerChannel(mean)) * PerChannel(scale) + PerChannel(bias)).to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& xf = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& mean = saved[2];
    const torch::Tensor& invstd = saved[3];
    const torch::Tensor& count = saved[4];
    auto* sum = reinterpret_cast<ReplicaSum*>(ctx->saved_data["sum"].toInt());
    const int64_t channels = xf.size(1);

    const torch::Tensor dy = grad_outputs[0].to(torch::kFloat);
    const torch::Tensor xmu = xf - PerChannel(mean);
    const torch::Tensor sum_dy = dy.sum(kReduceDims);
    const torch::Tensor sum_dy_xmu = (dy * xmu).sum(kReduceDims);
    const torch::Tensor grad_weight = sum_dy_xmu * invstd;
    const torch::Tensor grad_bias = sum_dy;

    torch::Tensor global = torch::cat({sum_dy, sum_dy_xmu});
    if (sum != nullptr) sum->Sum(global);
    const torch::Tensor mean_dy = global.narrow(0, 0, channels) / count;
    const torch::Tensor mean_dy_xmu = global.narrow(0, channels, channels) / count;
    const torch::Tensor dx = (dy - PerChannel(mean_dy) - xmu * PerChannel(invstd * invstd * mean_dy_xmu)) *
                             PerChannel(invstd * weight);
    const auto dtype = ctx->saved_data["dtype"].toScalarType();
    return {dx.to(dtype), grad_weight, grad_bias, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

SyncBatchNorm2d::SyncBatchNorm2d(int64_t channels, double eps, double momentum) : eps_(eps), momentum_(momentum) {
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
  running_mean = register_buffer("running_mean", torch::zeros({channels}));
  running_var = register_buffer("running_var", torch::ones({channels}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
}

torch::Tensor SyncBatchNorm2d::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 4, "SyncBatchNorm2d expects [N, C, H, W], got ", x.sizes());
  if (!is_training()) {
    return at::batch_norm(x, weight, bias, running_mean, running_var, /*training=*/false, momentum_, eps_,
                          at::globalContext().userEnabledCuDNN());
  }
  const int64_t channels = x.size(1);
  torch::Tensor mean, invstd, count;
  {
    torch::NoGradGuard no_grad;
    // Sums about the running mean (the same on every rank, as the running
    // statistics are): one collective, without the cancellation of raw
    // sums of squares once activations drift from zero.
    const torch::Tensor shift = running_mean.to(torch::kFloat).clone();
    const torch::Tensor centered = x.detach().to(torch::kFloat) - PerChannel(shift);
    const double local_count = static_cast<double>(x.numel() / std::max<int64_t>(channels, 1));
    torch::Tensor stats = torch::cat({centered.sum(kReduceDims), (centered * centered).sum(kReduceDims),
                                      torch::full({1}, local_count, centered.options())});
    if (sum_ != nullptr) sum_->Sum(stats);
    count = stats.narrow(0, 2 * channels, 1);
    const torch::Tensor shifted_mean = stats.narrow(0, 0, channels) / count;
    const torch::Tensor var = (stats.narrow(0, channels, channels) / count - shifted_mean * shifted_mean).clamp_min(0);
    mean = shift + shifted_mean;
    invstd = (var + eps_).rsqrt();
    // Running variance is the unbiased estimate, as in BatchNorm2d.
    const torch::Tensor unbiased = var * count / (count - 1).clamp_min(1);
    running_mean.mul_(1 - momentum_).add_(mean.to(running_mean.dtype()), momentum_);
    running_var.mul_(1 - momentum_).add_(unbiased.to(running_var.dtype()), momentum_);
    num_batches_tracked.add_(1);
  }
  return SyncBatchNormFunction::apply(x, weight, bias, mean, invstd, count, sum_);
}

}  // namespace herd
