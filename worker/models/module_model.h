// Adapts a torch::nn::Module that maps inputs to logits into a Model (the
// built-in models all take this shape).
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>

#include "worker/models/model.h"

namespace herd {

class LogitsModule : public torch::nn::Module {
 public:
  // [N, ...sample_shape] -> [N, C] or [N, T, C].
  virtual torch::Tensor forward(const torch::Tensor& inputs) = 0;
  // Called once the parameters hold their initial values: a module may move
  // them to the memory layout its kernels run fastest in. Values (and so
  // every checkpoint, hash and all-reduce, which see logical order) stay.
  virtual void ChooseLayouts() {}
  // See Model::SetReplicaSum.
  virtual bool SetReplicaSum(ReplicaSum* /*sum*/) { return false; }
  // See Model::Config.
  virtual std::string Config() const { return "{}"; }
};

class ModuleModel : public Model {
 public:
  ModuleModel(std::string name, std::shared_ptr<LogitsModule> module);

  std::vector<torch::Tensor> Parameters() override;
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() override;
  std::vector<std::pair<std::string, torch::Tensor>> NamedBuffers() override;
  bool SetReplicaSum(ReplicaSum* sum) override { return module_->SetReplicaSum(sum); }
  std::string Config() const override { return module_->Config(); }
  ModelOutput Forward(const Batch& batch) override;
  void SetTraining(bool training) override;
  void To(const torch::Device& device) override;
  std::string name() const override { return name_; }

 private:
  std::string name_;
  std::shared_ptr<LogitsModule> module_;
  torch::Device device_ = torch::kCPU;
};

// Mean cross-entropy over all positions; 0 (with a graph) for no positions.
torch::Tensor MeanCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace herd
