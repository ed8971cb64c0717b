// Random but learnable classification data: standard-normal features
// labelled by argmax of a fixed random linear teacher.
#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"
#include "worker/data/dataset_loaders.h"
#include "worker/data/tensor_dataset.h"

namespace herd {
namespace {

// Distinct, well-separated generator seeds for the teacher and each split.
uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

enum Stream : uint64_t { kTeacher = 0, kTrainSamples = 1, kEvalSamples = 2 };

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> MakeSyntheticDataset(int64_t samples, int64_t features, int64_t classes,
                                                              bool train, uint64_t seed) {
  if (samples <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.synthetic_samples must be positive, got ", samples));
  }
  if (features <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.synthetic_features must be positive, got ", features));
  }
  if (classes < 2) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.synthetic_classes must be at least 2, got ", classes));
  }
  const int64_t count = train ? samples : std::max<int64_t>(1, samples / 8);
  const at::Generator teacher_rng = at::detail::createCPUGenerator(StreamSeed(seed, kTeacher));
  const torch::Tensor teacher = at::randn({classes, features}, teacher_rng, at::kFloat);
  const at::Generator sample_rng = at::detail::createCPUGenerator(StreamSeed(seed, train ? kTrainSamples : kEvalSamples));
  torch::Tensor inputs = at::randn({count, features}, sample_rng, at::kFloat);
  torch::Tensor targets = inputs.matmul(teacher.t()).argmax(1);
  return std::unique_ptr<Dataset>(new TensorDataset(std::move(inputs), std::move(targets), classes));
}

}  // namespace herd
