// Batch norm over the union of all ranks' batches (resnet_small's
// norm: sync_batch), the math of PyTorch's SyncBatchNorm: forward sums
// [sum, sum of squares, count] per channel over the ranks, backward sums
// [sum_dy, sum_dy_xmu]. Parameters and buffers carry BatchNorm2d's names
// (weight, bias, running_mean, running_var, num_batches_tracked), so a
// checkpoint does not care which of the two wrote it. Without a ReplicaSum
// (or with one rank) it is plain batch norm.
#pragma once

#include <torch/nn/module.h>

#include "worker/models/replica_sum.h"

namespace herd {

class SyncBatchNorm2d : public torch::nn::Module {
 public:
  explicit SyncBatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);

  // [N, C, H, W]. Training: normalizes with the statistics of every rank's
  // batch and updates the running statistics with them (so they stay
  // identical on all ranks). Eval: the running statistics.
  torch::Tensor forward(const torch::Tensor& x);

  // Not owned; null: this rank alone.
  void set_replica_sum(ReplicaSum* sum) { sum_ = sum; }

  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  double eps_;
  double momentum_;
  ReplicaSum* sum_ = nullptr;
};

}  // namespace herd
