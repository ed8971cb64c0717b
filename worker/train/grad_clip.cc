#include "worker/train/grad_clip.h"

#include <cmath>

namespace herd {

double SquaredNorm(const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (const torch::Tensor& g : grads) {
    if (g.defined() && g.numel() > 0) sum += g.to(torch::kFloat64).pow(2).sum().item<double>();
  }
  return sum;
}

double ClipScale(double norm, double max_norm) {
  const double scale = max_norm / (norm + 1e-6);
  return scale < 1 ? scale : 1;
}

void ScaleGradients(const std::vector<torch::Tensor>& grads, double scale) {
  if (scale == 1) return;
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& g : grads) {
    if (g.defined()) g.mul_(scale);
  }
}

double ClipGradNorm(const std::vector<torch::Tensor>& params, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : params) grads.push_back(p.grad());
  const double norm = std::sqrt(SquaredNorm(grads));
  ScaleGradients(grads, ClipScale(norm, max_norm));
  return norm;
}

}  // namespace herd
