#include <exception>

#include "absl/strings/str_cat.h"
#include "worker/data/dataset.h"
#include "worker/data/dataset_loaders.h"

namespace herd {

absl::StatusOr<std::unique_ptr<Dataset>> LoadDataset(const v1::DatasetSpec& spec, bool train, uint64_t seed) {
  try {
    if (spec.kind() == "idx") return LoadIdxDataset(spec.path(), train);
    if (spec.kind() == "text") return LoadTextDataset(spec.path(), spec.sequence_length(), train);
    if (spec.kind() == "tokens") return LoadTokenDataset(spec, train);
    if (spec.kind() == "npy") return LoadNpyDataset(spec, train);
    if (spec.kind() == "synthetic") {
      return MakeSyntheticDataset(spec.synthetic_samples(), spec.synthetic_features(), spec.synthetic_classes(),
                                  train, seed);
    }
  } catch (const std::exception& e) {  // c10::Error included
    return absl::InternalError(absl::StrCat("loading dataset '", spec.kind(), "': ", e.what()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dataset.kind '", spec.kind(), "': expected idx, text, tokens, npy or synthetic"));
}

}  // namespace herd
