#include "worker/data/tensor_dataset.h"

#include <utility>

namespace herd {

Dataset::~Dataset() = default;

torch::Tensor IndexTensor(const std::vector<int64_t>& indices) {
  if (indices.empty()) return at::empty({0}, at::kLong);
  return at::from_blob(const_cast<int64_t*>(indices.data()), {static_cast<int64_t>(indices.size())}, at::kLong);
}

TensorDataset::TensorDataset(torch::Tensor inputs, torch::Tensor targets, int64_t num_classes)
    : inputs_(std::move(inputs)), targets_(std::move(targets)), num_classes_(num_classes) {}

std::vector<int64_t> TensorDataset::sample_shape() const {
  auto sizes = inputs_.sizes();
  return std::vector<int64_t>(sizes.begin() + 1, sizes.end());
}

Batch TensorDataset::Get(const std::vector<int64_t>& indices) const {
  const torch::Tensor index = IndexTensor(indices);
  return Batch{inputs_.index_select(0, index), targets_.index_select(0, index)};
}

}  // namespace herd
