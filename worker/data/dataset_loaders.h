// One loader per dataset kind; LoadDataset (load_dataset.cc) picks one.
#pragma once

#include <memory>
#include <string>

#include "worker/data/dataset.h"

namespace herd {

absl::StatusOr<std::unique_ptr<Dataset>> LoadIdxDataset(const std::string& folder, bool train);
absl::StatusOr<std::unique_ptr<Dataset>> LoadTextDataset(const std::string& file, int64_t sequence_length, bool train);
// Memory-mapped kinds; they read the fields of `spec` that docs/job-spec.md
// lists for them.
absl::StatusOr<std::unique_ptr<Dataset>> LoadTokenDataset(const v1::DatasetSpec& spec, bool train);
absl::StatusOr<std::unique_ptr<Dataset>> LoadNpyDataset(const v1::DatasetSpec& spec, bool train);
absl::StatusOr<std::unique_ptr<Dataset>> MakeSyntheticDataset(int64_t samples, int64_t features, int64_t classes,
                                                              bool train, uint64_t seed);

}  // namespace herd
