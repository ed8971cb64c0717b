#include <exception>

#include "absl/strings/str_cat.h"
#include "common/spec_enums.h"
#include "worker/data/dataset.h"
#include "worker/data/dataset_loaders.h"

namespace herd {

absl::StatusOr<std::unique_ptr<Dataset>> LoadDataset(const v1::DatasetSpec& spec, bool train, uint64_t seed) {
  try {
    switch (spec.kind()) {
      case v1::DATASET_KIND_IDX:
        return LoadIdxDataset(spec.path(), train);
      case v1::DATASET_KIND_TEXT:
        return LoadTextDataset(spec.path(), spec.sequence_length(), train);
      case v1::DATASET_KIND_TOKENS:
        return LoadTokenDataset(spec, train);
      case v1::DATASET_KIND_NPY:
        return LoadNpyDataset(spec, train);
      case v1::DATASET_KIND_SYNTHETIC:
        return MakeSyntheticDataset(spec.synthetic_samples(), spec.synthetic_features(), spec.synthetic_classes(),
                                    train, seed);
      default:
        break;
    }
  } catch (const std::exception& e) {  // c10::Error included
    return absl::InternalError(absl::StrCat("loading dataset '", SpecName(spec.kind()), "': ", e.what()));
  }
  return absl::InvalidArgumentError(absl::StrCat("dataset.kind '", SpecName(spec.kind()), "': expected ",
                                                 SpecEnumChoices(v1::DatasetKind_descriptor())));
}

}  // namespace herd
