// torchscript: a user's TorchScript file. forward(x) returns logits (herd
// computes the cross-entropy) or forward(x, y) returns the loss itself. The
// file is code: it runs with the worker's rights.
#include <torch/script.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/models/builtin_models.h"
#include "worker/models/model_error.h"

namespace herd {
namespace {

// Checked before the loss, so a model whose output does not fit the data
// fails naming both (LibTorch would say "Target 8 is out of bounds").
std::string ShapeOf(const torch::Tensor& tensor) { return absl::StrCat("[", absl::StrJoin(tensor.sizes(), ", "), "]"); }

void CheckLogits(const torch::Tensor& logits, const torch::Tensor& targets, int64_t classes) {
  const std::string shape = ShapeOf(logits);
  if (classes > 0 && (logits.dim() < 2 || logits.size(-1) != classes)) {
    throw ModelContractError(
        absl::StrCat("model returned logits of shape ", shape, "; the dataset has ", classes, " classes"));
  }
  const int64_t rows = logits.dim() < 2 ? logits.numel() : logits.numel() / logits.size(-1);
  if (logits.dim() < 2 || rows != targets.numel()) {
    throw ModelContractError(absl::StrCat("model returned logits of shape ", shape, " for a batch of ",
                                          targets.numel(), " targets; expected one row of class scores per target"));
  }
}

class TorchScriptModel : public Model {
 public:
  TorchScriptModel(torch::jit::Module module, bool forward_returns_loss, int64_t classes)
      : module_(std::move(module)), forward_returns_loss_(forward_returns_loss), classes_(classes) {}

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
      c10::IValue returned = module_.forward({inputs, targets});
      if (!returned.isTensor() || returned.toTensor().numel() != 1) {
        const std::string what = returned.isTensor() ? absl::StrCat("a tensor of shape ", ShapeOf(returned.toTensor()))
                                                     : returned.tagKind();
        throw ModelContractError(
            absl::StrCat("model forward(x, y) returned ", what, "; expected the loss, a scalar tensor"));
      }
      out.loss = returned.toTensor().reshape({});
    } else {
      c10::IValue returned = module_.forward({inputs});
      if (!returned.isTensor()) {
        throw ModelContractError(absl::StrCat("model forward(x) returned ", returned.tagKind(),
                                              "; expected a tensor of logits"));
      }
      out.logits = returned.toTensor();
      CheckLogits(out.logits, targets, classes_);
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
  int64_t classes_;  // 0: unknown, not checked
  torch::Device device_ = torch::kCPU;
};

absl::Status CannotLoad(const std::string& path, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat("model.path ", path, ": cannot load TorchScript: ", reason));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadTorchScriptModel(const std::string& path, int64_t classes) {
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
  return std::unique_ptr<Model>(new TorchScriptModel(std::move(module), /*forward_returns_loss=*/inputs == 2, classes));
}

}  // namespace herd
