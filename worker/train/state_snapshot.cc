#include "worker/train/state_snapshot.h"

#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"

namespace herd {
namespace {

using torch::optim::AdamParamState;
using torch::optim::AdamWParamState;
using torch::optim::OptimizerParamState;
using torch::optim::SGDParamState;

// Copies into `to`'s buffer when it fits, else allocates a copy.
void CopyTensor(const torch::Tensor& from, torch::Tensor* to) {
  if (!from.defined()) {
    *to = torch::Tensor();
  } else if (to->defined() && to->sizes() == from.sizes() && to->dtype() == from.dtype() &&
             to->device() == from.device()) {
    to->copy_(from);
  } else {
    *to = from.detach().clone();
  }
}

template <typename State>
State* ReuseOrMake(std::unique_ptr<OptimizerParamState>* slot) {
  if (auto* existing = dynamic_cast<State*>(slot->get())) return existing;
  *slot = std::make_unique<State>();
  return static_cast<State*>(slot->get());
}

template <typename AdamState>
void CopyAdam(const AdamState& from, std::unique_ptr<OptimizerParamState>* slot) {
  AdamState* to = ReuseOrMake<AdamState>(slot);
  to->step(from.step());
  CopyTensor(from.exp_avg(), &to->exp_avg());
  CopyTensor(from.exp_avg_sq(), &to->exp_avg_sq());
  CopyTensor(from.max_exp_avg_sq(), &to->max_exp_avg_sq());
}

// A deep copy of one parameter's optimizer state into `slot`.
absl::Status CopyParamState(const OptimizerParamState& from, std::unique_ptr<OptimizerParamState>* slot) {
  if (const auto* sgd = dynamic_cast<const SGDParamState*>(&from)) {
    CopyTensor(sgd->momentum_buffer(), &ReuseOrMake<SGDParamState>(slot)->momentum_buffer());
  } else if (const auto* adamw = dynamic_cast<const AdamWParamState*>(&from)) {
    CopyAdam(*adamw, slot);
  } else if (const auto* adam = dynamic_cast<const AdamParamState*>(&from)) {
    CopyAdam(*adam, slot);
  } else {
    return absl::UnimplementedError("in-memory snapshot: unsupported optimizer state");
  }
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
  for (size_t i = 0; i < params.size(); ++i) {
    CopyTensor(params[i], &params_[i]);
    auto it = optimizer->state().find(OptimizerStateKey(params[i]));
    if (it == optimizer->state().end()) {
      optimizer_[i].reset();
    } else if (auto s = CopyParamState(*it->second, &optimizer_[i]); !s.ok()) {
      params_.clear();
      return s;
    }
  }
  const std::vector<torch::Tensor> buffers = model->Buffers();
  buffers_.resize(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) CopyTensor(buffers[i], &buffers_[i]);
  rng_ = at::detail::getDefaultCPUGenerator().get_state();
  outer_.resize(outer_state.size());
  for (size_t i = 0; i < outer_state.size(); ++i) CopyTensor(outer_state[i], &outer_[i]);
  rank_.resize(rank_state.size());
  for (size_t i = 0; i < rank_state.size(); ++i) CopyTensor(rank_state[i], &rank_[i]);
  position_ = position;
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
    if (auto s = CopyParamState(*optimizer_[i], &copy); !s.ok()) return s;
    optimizer->state()[OptimizerStateKey(params[i])] = std::move(copy);
  }
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(rng_);
  outer_state->clear();
  for (const auto& t : outer_) outer_state->push_back(t.clone());
  if (rank_state != nullptr) {
    rank_state->clear();
    for (const auto& t : rank_) rank_state->push_back(t.clone());
  }
  *position = position_;
  return absl::OkStatus();
}

}  // namespace herd
