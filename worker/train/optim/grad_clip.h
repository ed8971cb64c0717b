// Gradient clipping by global L2 norm (grad_clip_norm), one rule for both
// gradient paths: whole all-reduced gradients, and the pieces each rank
// holds when they are reduce-scattered (sync.shard_optimizer), whose squared
// norms are summed across ranks. Squares of float32 values are exact in
// float64 and their sums round at 1e-16, so the float scale both paths
// apply agrees to the bit unless it lies that close to a float rounding
// boundary; torch::nn::utils::clip_grad_norm_ (per-tensor float32 norms)
// would not let the sharded path match the plain one at all. Same formula:
// scale max_norm / (norm + 1e-6) where that is below 1.
#pragma once

#include <torch/types.h>

#include <vector>

namespace herd {

// Sum of the squares of every element, in float64. Undefined tensors count 0.
double SquaredNorm(const std::vector<torch::Tensor>& grads);

// What the gradients are multiplied by: max_norm / (norm + 1e-6), or 1 when
// that is not below 1 (nothing to clip).
double ClipScale(double norm, double max_norm);

// Multiplies each (defined) tensor in place by `scale` (as a float scalar).
void ScaleGradients(const std::vector<torch::Tensor>& grads, double scale);

// Clips the parameters' whole gradients to a global norm of at most
// `max_norm`; returns the norm before clipping. No collective.
double ClipGradNorm(const std::vector<torch::Tensor>& params, double max_norm);

// ClipGradNorm on the gradients' device, with no host read: the same
// float64 sums in the same order, so the same scale to the bit. Returns the
// norm before clipping, a float64 scalar tensor on the gradients' device.
torch::Tensor ClipGradNormOnDevice(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace herd
