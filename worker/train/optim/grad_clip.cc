#include "worker/train/optim/grad_clip.h"

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

torch::Tensor ClipGradNormOnDevice(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  // Summed tensor by tensor, in SquaredNorm's order.
  torch::Tensor squares = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : params) {
    const torch::Tensor& g = p.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    if (g.numel() > 0) squares = squares + g.to(torch::kFloat64).pow(2).sum();
  }
  torch::Tensor norm = squares.sqrt();
  // ClipScale: max_norm / (norm + 1e-6), at most 1 (multiplying by 1 is exact).
  const torch::Tensor scale = torch::clamp_max(max_norm / (norm + 1e-6), 1.0);
  for (torch::Tensor& g : grads) g.mul_(scale);
  return norm;
}

}  // namespace herd
