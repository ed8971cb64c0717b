// A dataset held as two in-memory tensors (inputs [N, ...], targets [N]);
// Get() is an index_select on each. IDX and synthetic sets use it.
#pragma once

#include "worker/data/dataset.h"

namespace herd {

class TensorDataset : public Dataset {
 public:
  TensorDataset(torch::Tensor inputs, torch::Tensor targets, int64_t num_classes);

  int64_t size() const override { return inputs_.size(0); }
  int64_t num_classes() const override { return num_classes_; }
  std::vector<int64_t> sample_shape() const override;
  Batch Get(const std::vector<int64_t>& indices) const override;

 private:
  torch::Tensor inputs_;
  torch::Tensor targets_;
  int64_t num_classes_;
};

// Wraps `indices` as an int64 tensor without copying (valid while they live).
torch::Tensor IndexTensor(const std::vector<int64_t>& indices);

}  // namespace herd
