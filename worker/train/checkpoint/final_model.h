// The trained model as it leaves the trainer: every rank writes it into its
// own job dir, as a LibTorch archive (model-final.pt, for LibTorch and
// herd's tests) and as safetensors (model-final.safetensors, for PyTorch and
// Hugging Face tools), both keyed by the model's state_dict names.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_files.h"
#include "proto/herd.pb.h"

namespace herd {

// Every rank writes its own copy (kFinalModelFile, kFinalSafetensorsFile), so
// replicas can be compared and any surviving worker holds the result.

// The safetensors bytes of `tensors` (moved to the CPU, made contiguous).
// INVALID_ARGUMENT naming the tensor for a dtype the format lacks.
absl::StatusOr<std::string> SafetensorsOf(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                          const std::map<std::string, std::string>& metadata);

// Writes both files into `dir`, each atomically (temp file, rename), and
// returns their names, sizes and SHA-256 digests for the final report.
absl::StatusOr<std::vector<v1::ModelFile>> WriteFinalModel(
    const std::string& dir, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata);

}  // namespace herd
