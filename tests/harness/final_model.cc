#include "tests/harness/final_model.h"

#include <torch/serialize/archive.h>

namespace herd::testing {

std::map<std::string, torch::Tensor> LoadFinalModel(const std::string& job_dir) {
  torch::serialize::InputArchive archive;
  archive.load_from(job_dir + "/model-final.pt");
  std::map<std::string, torch::Tensor> params;
  for (const auto& key : archive.keys()) {
    torch::Tensor t;
    archive.read(key, t);
    params[key] = t;
  }
  return params;
}

std::vector<std::string> DifferingTensors(const std::map<std::string, torch::Tensor>& a,
                                          const std::map<std::string, torch::Tensor>& b) {
  std::vector<std::string> differing;
  for (const auto& [name, tensor] : a) {
    auto it = b.find(name);
    if (it == b.end() || !torch::equal(tensor, it->second)) differing.push_back(name);
  }
  for (const auto& [name, tensor] : b) {
    if (a.count(name) == 0) differing.push_back(name);
  }
  return differing;
}

}  // namespace herd::testing
