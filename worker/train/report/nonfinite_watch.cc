#include "worker/train/report/nonfinite_watch.h"

#include "absl/strings/str_cat.h"

namespace herd {

void NonFiniteWatch::Reset(const torch::Device& device) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  step_ = torch::full({}, -1.0, options);
  value_ = torch::zeros({}, options);
  kind_ = torch::zeros({}, options);
}

void NonFiniteWatch::Observe(const torch::Tensor& value, int64_t step, Kind kind) {
  torch::NoGradGuard no_grad;
  const torch::Tensor v = value.detach().to(torch::kFloat64).reshape({});
  const torch::Tensor first = torch::logical_not(torch::isfinite(v)).logical_and(step_.lt(0));
  step_ = torch::where(first, torch::full({}, static_cast<double>(step), step_.options()), step_);
  value_ = torch::where(first, v, value_);
  kind_ = torch::where(first, torch::full({}, static_cast<double>(kind), kind_.options()), kind_);
}

absl::Status NonFiniteWatch::Verdict(double step, double value, double kind) {
  if (step < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "training diverged: the ", kind == kGradientNorm ? "gradient norm" : "loss", " of step ",
      static_cast<int64_t>(step), " is ", absl::StrCat(value),
      " (on_nonfinite: fail; lower optimizer.lr, set grad_clip_norm, or set on_nonfinite: skip_step)"));
}

}  // namespace herd
