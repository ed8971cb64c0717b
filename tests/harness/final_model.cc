#include "tests/harness/final_model.h"

#include <torch/serialize/archive.h>

#include <cmath>
#include <limits>

#include "proto/herd.pb.h"
#include "worker/models/model.h"

namespace herd::testing {
namespace {

SavedTensor ToSaved(const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.detach().cpu().contiguous();
  SavedTensor saved;
  saved.dtype = c10::toString(t.scalar_type());
  saved.shape = t.sizes().vec();
  saved.bytes.assign(static_cast<const char*>(t.data_ptr()), t.nbytes());
  const torch::Tensor as_double = t.to(torch::kDouble).flatten();
  const double* first = as_double.data_ptr<double>();
  saved.values.assign(first, first + as_double.numel());
  return saved;
}

}  // namespace

SavedModel LoadFinalModel(const std::string& job_dir) {
  torch::serialize::InputArchive archive;
  archive.load_from(job_dir + "/model-final.pt");
  SavedModel model;
  for (const auto& key : archive.keys()) {
    torch::Tensor t;
    archive.read(key, t);
    model[key] = ToSaved(t);
  }
  return model;
}

SavedModel InitialParameters(const std::string& model_name, const std::vector<int64_t>& input_shape, int classes,
                             uint64_t seed) {
  v1::ModelSpec spec;
  spec.set_name(model_name);
  auto created = CreateModel(spec, ModelInputInfo{input_shape, classes}, seed);
  if (!created.ok()) throw std::runtime_error(created.status().ToString());
  SavedModel model;
  for (const auto& [name, value] : (*created)->NamedParameters()) model[name] = ToSaved(value);
  return model;
}

bool BitwiseEqual(const SavedTensor& a, const SavedTensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.bytes == b.bytes;
}

double MaxAbsDifference(const SavedTensor& a, const SavedTensor& b) {
  if (a.shape != b.shape) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    const double diff = std::abs(a.values[i] - b.values[i]);
    if (!(diff <= worst)) worst = diff;  // a NaN difference is the worst
  }
  return worst;
}

double MaxAbs(const SavedTensor& t) {
  double largest = 0;
  for (double v : t.values) {
    if (!(std::abs(v) <= largest)) largest = std::abs(v);
  }
  return largest;
}

std::vector<std::string> DifferingTensors(const SavedModel& a, const SavedModel& b) {
  std::vector<std::string> differing;
  for (const auto& [name, tensor] : a) {
    auto it = b.find(name);
    if (it == b.end() || !BitwiseEqual(tensor, it->second)) differing.push_back(name);
  }
  for (const auto& [name, tensor] : b) {
    if (a.count(name) == 0) differing.push_back(name);
  }
  return differing;
}

}  // namespace herd::testing
