// torchscript: a user's TorchScript file. forward(x) returns logits (herd
// computes the cross-entropy) or forward(x, y) returns the loss itself. The
// file is code: it runs with the worker's rights.
#include <torch/script.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/models/builtin_models.h"

namespace herd {
namespace {

class TorchScriptModel : public Model {
 public:
  TorchScriptModel(torch::jit::Module module, bool forward_returns_loss)
      : module_(std::move(module)), forward_returns_loss_(forward_returns_loss) {}

  std::vector<torch::Tensor> Parameters() override {
    std::vector<torch::Tensor> parameters;
    for (const torch::Tensor& parameter : module_.parameters()) parameters.push_back(parameter);
    return parameters;
  }

  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() override {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& item : module_.named_parameters()) named.emplace_back(item.name, item.value);
    return named;
  }

  std::vector<std::pair<std::string, torch::Tensor>> NamedBuffers() override {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& item : module_.named_buffers()) named.emplace_back(item.name, item.value);
    return named;
  }

  ModelOutput Forward(const Batch& batch) override {
    const torch::Tensor inputs = batch.inputs.to(device_);
    const torch::Tensor targets = batch.targets.to(device_);
    ModelOutput out;
    if (forward_returns_loss_) {
      out.loss = module_.forward({inputs, targets}).toTensor();
    } else {
      out.logits = module_.forward({inputs}).toTensor();
      out.loss = MeanCrossEntropy(out.logits, targets);
    }
    return out;
  }

  void SetTraining(bool training) override { module_.train(training); }

  void To(const torch::Device& device) override {
    module_.to(device);
    device_ = device;
  }

  std::string name() const override { return "torchscript"; }

 private:
  torch::jit::Module module_;
  bool forward_returns_loss_;
  torch::Device device_ = torch::kCPU;
};

absl::Status CannotLoad(const std::string& path, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat("model.path ", path, ": cannot load TorchScript: ", reason));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadTorchScriptModel(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("model.path: required when model.name is torchscript");
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return CannotLoad(path, "no such file");
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, torch::kCPU);
  } catch (const c10::Error& e) {
    return CannotLoad(path, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return CannotLoad(path, e.what());
  }
  const auto forward = module.find_method("forward");
  if (!forward) return CannotLoad(path, "the module has no forward method");
  const size_t inputs = forward->function().getSchema().arguments().size() - 1;  // minus self
  if (inputs != 1 && inputs != 2) {
    return CannotLoad(path, absl::StrCat("forward must take (x) or (x, y); it takes ", inputs, " arguments"));
  }
  return std::unique_ptr<Model>(new TorchScriptModel(std::move(module), /*forward_returns_loss=*/inputs == 2));
}

}  // namespace herd
