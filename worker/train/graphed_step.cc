#include "worker/train/graphed_step.h"

#include <utility>

namespace herd {

absl::StatusOr<std::unique_ptr<GraphedStep>> GraphedStep::Create(const torch::Device& device,
                                                                  std::vector<torch::Tensor> params) {
  auto captured = MakeCapturedStep(device);
  if (!captured.ok()) return captured.status();
  torch::Tensor lr = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  return std::unique_ptr<GraphedStep>(new GraphedStep(*std::move(captured), std::move(lr), std::move(params)));
}

GraphedStep::GraphedStep(std::unique_ptr<CapturedStep> captured, torch::Tensor lr, std::vector<torch::Tensor> params)
    : captured_(std::move(captured)), lr_(std::move(lr)), params_(std::move(params)) {}

absl::Status GraphedStep::Capture(const Batch& host_batch, double lr, torch::optim::Optimizer& optimizer,
                                  const GraphedBody& body) {
  // The old graph's gradients go with it; the capture's backward allocates
  // the new ones in the new graph's memory.
  grads_.clear();
  for (const auto& p : params_) p.mutable_grad() = torch::Tensor();
  if (!host_batch.inputs.defined() || !host_batch.targets.defined()) {
    return absl::FailedPreconditionError("captured step: the batch has no inputs or no targets");
  }
  captured_->AllocateInputs({host_batch.inputs, host_batch.targets});
  if (auto s = captured_->Fill({host_batch.inputs, host_batch.targets}); !s.ok()) return s;
  lr_.fill_(lr);
  const StepCounts before = ReadStepCounts(optimizer);
  const Batch batch{captured_->inputs()[0], captured_->inputs()[1]};
  GraphedOutputs outputs;
  absl::Status s = captured_->Capture([&] { outputs = body(batch, lr_); });
  if (!s.ok()) {
    RestoreStepCounts(before, optimizer);
    for (const auto& p : params_) p.mutable_grad() = torch::Tensor();  // the failed capture's, never computed
    return s;
  }
  counted_ = AdvancedStates(before, ReadStepCounts(optimizer));
  for (const auto& p : params_) grads_.push_back(p.grad());
  outputs_ = std::move(outputs);
  captured_->Replay();
  return absl::OkStatus();
}

absl::Status GraphedStep::Replay(const Batch& host_batch, double lr, torch::optim::Optimizer& optimizer) {
  if (!captured_->captured()) return absl::FailedPreconditionError("captured step: replay before a capture");
  if (auto s = captured_->Fill({host_batch.inputs, host_batch.targets}); !s.ok()) return s;
  lr_.fill_(lr);  // device work on the current stream, queued before the graph's: no host wait
  captured_->Replay();
  AdvanceStepCounts(counted_, optimizer);
  return absl::OkStatus();
}

}  // namespace herd
