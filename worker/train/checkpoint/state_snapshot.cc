#include "worker/train/checkpoint/state_snapshot.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "worker/train/optim/optimizer_state.h"

namespace herd {
namespace {

using torch::optim::OptimizerParamState;

// Where a copy goes: the host (Capture of a host snapshot), a given device
// (Apply: the parameter's), or unset: `from`'s own device.
using Destination = std::optional<torch::Device>;
const Destination kHost = torch::Device(torch::kCPU);

// Copies into `to`'s buffer when it fits, else allocates a copy on
// `destination`. Device to host lands in pinned memory, so the copy is a
// DMA that Capture waits for once.
void CopyTensor(const torch::Tensor& from, torch::Tensor* to, Destination destination = std::nullopt) {
  if (!from.defined()) {
    *to = torch::Tensor();
    return;
  }
  const torch::Device device = destination.value_or(from.device());
  const bool to_host_from_device = device.is_cpu() && !from.device().is_cpu();
  if (!to->defined() || to->sizes() != from.sizes() || to->dtype() != from.dtype() || to->device() != device) {
    *to = torch::empty(from.sizes(), from.options().device(device).pinned_memory(to_host_from_device));
  }
  to->copy_(from, /*non_blocking=*/to_host_from_device);
}

// A deep copy of one parameter's optimizer state into `slot`, into the
// tensors already there where they fit.
absl::Status CopyParamState(const OptimizerParamState& from, std::unique_ptr<OptimizerParamState>* slot,
                            Destination destination) {
  auto state = ReadParamState(from);
  if (!state.ok()) return absl::UnimplementedError("in-memory snapshot: unsupported optimizer state");
  ParamState to{state->kind, state->step, {}};
  if (*slot != nullptr) {
    auto existing = ReadParamState(**slot);
    if (existing.ok() && existing->kind == to.kind) to.tensors = existing->tensors;
  }
  to.tensors.resize(state->tensors.size());
  for (size_t i = 0; i < state->tensors.size(); ++i) CopyTensor(state->tensors[i], &to.tensors[i], destination);
  WriteParamState(to, slot);
  return absl::OkStatus();
}

}  // namespace

absl::Status StateSnapshot::Capture(Model* model, torch::optim::Optimizer* optimizer,
                                    const TrainingPosition& position, const std::vector<torch::Tensor>& outer_state,
                                    const std::vector<torch::Tensor>& rank_state) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> params = model->Parameters();
  params_.resize(params.size());
  optimizer_.resize(params.size());
  const Destination destination = on_host_ ? kHost : std::nullopt;
  bool device_copies = false;
  for (size_t i = 0; i < params.size(); ++i) {
    device_copies |= on_host_ && params[i].is_cuda();
    CopyTensor(params[i], &params_[i], destination);
    auto it = optimizer->state().find(OptimizerStateKey(params[i]));
    if (it == optimizer->state().end()) {
      optimizer_[i].reset();
    } else if (auto s = CopyParamState(*it->second, &optimizer_[i], destination); !s.ok()) {
      params_.clear();
      return s;
    }
  }
  const std::vector<torch::Tensor> buffers = model->Buffers();
  buffers_.resize(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) CopyTensor(buffers[i], &buffers_[i], destination);
  rng_ = at::detail::getDefaultCPUGenerator().get_state();
  outer_.resize(outer_state.size());
  for (size_t i = 0; i < outer_state.size(); ++i) {
    device_copies |= on_host_ && outer_state[i].defined() && outer_state[i].is_cuda();
    CopyTensor(outer_state[i], &outer_[i], destination);
  }
  rank_.resize(rank_state.size());
  for (size_t i = 0; i < rank_state.size(); ++i) {
    device_copies |= on_host_ && rank_state[i].defined() && rank_state[i].is_cuda();
    CopyTensor(rank_state[i], &rank_[i], destination);
  }
  position_ = position;
  if (on_host_) {
    param_names_.clear();
    for (const auto& named : model->NamedParameters()) param_names_.push_back(named.first);
    buffer_names_.clear();
    for (const auto& named : model->NamedBuffers()) buffer_names_.push_back(named.first);
  }
  // The copies into pinned memory were queued on the device: done before
  // anyone reads them (the step's own kernels queue behind them anyway).
  if (device_copies) torch::cuda::synchronize();
  return absl::OkStatus();
}

absl::Status StateSnapshot::Apply(Model* model, torch::optim::Optimizer* optimizer, TrainingPosition* position,
                                  std::vector<torch::Tensor>* outer_state, std::vector<torch::Tensor>* rank_state) const {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> params = model->Parameters();
  if (params.size() != params_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot holds ", params_.size(), " parameters, the model has ", params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].sizes().equals(params_[i].sizes())) {
      return absl::InvalidArgumentError(absl::StrCat("snapshot parameter ", i, " has another shape"));
    }
  }
  const std::vector<torch::Tensor> buffers = model->Buffers();
  if (buffers.size() != buffers_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot holds ", buffers_.size(), " buffers, the model has ", buffers.size()));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers[i].sizes().equals(buffers_[i].sizes())) {
      return absl::InvalidArgumentError(absl::StrCat("snapshot buffer ", i, " has another shape"));
    }
  }
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(buffers_[i]);
  optimizer->state().clear();
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].copy_(params_[i]);
    if (optimizer_[i] == nullptr) continue;
    std::unique_ptr<OptimizerParamState> copy;
    // On the parameter's device: a host snapshot's state goes back to the GPU.
    if (auto s = CopyParamState(*optimizer_[i], &copy, params[i].device()); !s.ok()) return s;
    optimizer->state()[OptimizerStateKey(params[i])] = std::move(copy);
  }
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(rng_);
  // Fresh copies on the model's device, wherever the snapshot lives.
  const Destination device = params.empty() ? std::nullopt : Destination(params.front().device());
  auto copied = [&](const torch::Tensor& t) {
    torch::Tensor copy;
    CopyTensor(t, &copy, device);
    return copy;
  };
  outer_state->clear();
  for (const auto& t : outer_) outer_state->push_back(copied(t));
  if (rank_state != nullptr) {
    rank_state->clear();
    for (const auto& t : rank_) rank_state->push_back(copied(t));
  }
  *position = position_;
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> StateSnapshot::Serialize(
    const OptimizerFactory& make_optimizer) const {
  if (!on_host_ || params_.size() != param_names_.size() || buffers_.size() != buffer_names_.size()) {
    return absl::FailedPreconditionError("only a captured host snapshot serializes");
  }
  auto shadow = make_optimizer(params_);
  if (!shadow.ok()) return shadow.status();
  // The shadow optimizer over the copies holds the copied state (shared, not
  // copied again) under its own keys: its save() writes torch's format.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (optimizer_[i] != nullptr) (*shadow)->state()[OptimizerStateKey(params_[i])] = optimizer_[i]->clone();
  }
  TrainingStateParts parts;
  for (size_t i = 0; i < params_.size(); ++i) parts.tensors.emplace_back(param_names_[i], params_[i]);
  for (size_t i = 0; i < buffers_.size(); ++i) parts.tensors.emplace_back(buffer_names_[i], buffers_[i]);
  parts.optimizer = shadow->get();
  parts.rng = rng_;
  parts.position = position_;
  parts.outer_state = outer_;
  return SerializeTrainingParts(parts);
}

}  // namespace herd
