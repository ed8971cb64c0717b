// Factories for the built-in models, one per .cc so they compile in
// parallel. Each checks that it can take the dataset's inputs.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/models/model.h"
#include "worker/models/module_model.h"

namespace herd {

absl::StatusOr<std::shared_ptr<LogitsModule>> MakeMlp(const v1::ModelSpec& spec, const ModelInputInfo& info);
absl::StatusOr<std::shared_ptr<LogitsModule>> MakeMnistCnn(const v1::ModelSpec& spec, const ModelInputInfo& info);
absl::StatusOr<std::shared_ptr<LogitsModule>> MakeResnetSmall(const v1::ModelSpec& spec, const ModelInputInfo& info);
absl::StatusOr<std::shared_ptr<LogitsModule>> MakeCharTransformer(const v1::ModelSpec& spec, const ModelInputInfo& info);

// Loads spec.path; its parameters come from the file, identical on every rank.
// A forward(x) must return logits with `classes` scores per target (0: not
// checked); Forward throws ModelContractError naming both otherwise.
absl::StatusOr<std::unique_ptr<Model>> LoadTorchScriptModel(const std::string& path, int64_t classes);

// "{1, 28, 28}", for error messages.
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace herd
