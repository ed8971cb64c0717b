// The seam through which a model reaches the other replicas of its
// generation: sync_batch's batch norm sums per-channel statistics over all
// ranks in forward and backward. The trainer hands the model one per
// generation (a re-formed generation brings new communicators) and takes it
// back before the communicators go; with none set, a model sees only itself.
#pragma once

#include <torch/types.h>

namespace herd {

class ReplicaSum {
 public:
  virtual ~ReplicaSum() = default;
  // In place: `values` (contiguous float32 on the model's device) becomes its
  // elementwise sum over all ranks. Every rank calls with the same shape in
  // the same order. A failed collective leaves `values` as it was and is
  // reported by the owner (the trainer checks it after each step): autograd
  // is no place for a status.
  virtual void Sum(torch::Tensor& values) = 0;
};

}  // namespace herd
