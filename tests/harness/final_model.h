// Reads the parameters a trainer left in its job dir (model-final.pt).
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

namespace herd::testing {

std::map<std::string, torch::Tensor> LoadFinalModel(const std::string& job_dir);

// Names of the tensors that differ (bitwise) between two loaded models, plus
// any name present in only one of them.
std::vector<std::string> DifferingTensors(const std::map<std::string, torch::Tensor>& a,
                                          const std::map<std::string, torch::Tensor>& b);

}  // namespace herd::testing
