#include "worker/train/optim/optimizer_state.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

namespace herd {
namespace {

using torch::optim::AdamParamState;
using torch::optim::AdamWParamState;
using torch::optim::OptimizerParamState;
using torch::optim::SGDParamState;

// Adam and AdamW have distinct state types with the same fields.
template <typename AdamState>
ParamState ReadAdam(OptimizerKind kind, const AdamState& s) {
  ParamState state{kind, s.step(), std::vector<torch::Tensor>(3)};
  state.tensors[kExpAvg] = s.exp_avg();
  state.tensors[kExpAvgSq] = s.exp_avg_sq();
  state.tensors[kMaxExpAvgSq] = s.max_exp_avg_sq();
  return state;
}

template <typename AdamState>
void WriteAdam(const ParamState& state, AdamState* to) {
  to->step(state.step);
  to->exp_avg(state.tensors[kExpAvg]);
  to->exp_avg_sq(state.tensors[kExpAvgSq]);
  to->max_exp_avg_sq(state.tensors[kMaxExpAvgSq]);
}

// The object in `slot` when it is a State, else a new State put there.
template <typename State>
State* Reuse(std::unique_ptr<OptimizerParamState>* slot) {
  if (auto* existing = dynamic_cast<State*>(slot->get())) return existing;
  *slot = std::make_unique<State>();
  return static_cast<State*>(slot->get());
}

int64_t Bytes(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

}  // namespace

const std::vector<std::string>& StateTensorNames(OptimizerKind kind) {
  static const std::vector<std::string> kSgd = {"momentum_buffer"};
  static const std::vector<std::string> kAdam = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return kind == OptimizerKind::kSgd ? kSgd : kAdam;
}

bool CountsSteps(OptimizerKind kind) { return kind != OptimizerKind::kSgd; }

absl::StatusOr<OptimizerStateSpec> StateSpecOf(const torch::optim::OptimizerOptions& options) {
  if (dynamic_cast<const torch::optim::SGDOptions*>(&options) != nullptr) {
    return OptimizerStateSpec{OptimizerKind::kSgd, 1};
  }
  if (const auto* o = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) {
    return OptimizerStateSpec{OptimizerKind::kAdamW, o->amsgrad() ? 3u : 2u};
  }
  if (const auto* o = dynamic_cast<const torch::optim::AdamOptions*>(&options)) {
    return OptimizerStateSpec{OptimizerKind::kAdam, o->amsgrad() ? 3u : 2u};
  }
  return absl::UnimplementedError("unsupported optimizer (sgd, adam and adamw are)");
}

absl::StatusOr<ParamState> ReadParamState(const OptimizerParamState& state) {
  if (const auto* s = dynamic_cast<const SGDParamState*>(&state)) {
    return ParamState{OptimizerKind::kSgd, 0, {s->momentum_buffer()}};
  }
  if (const auto* s = dynamic_cast<const AdamWParamState*>(&state)) return ReadAdam(OptimizerKind::kAdamW, *s);
  if (const auto* s = dynamic_cast<const AdamParamState*>(&state)) return ReadAdam(OptimizerKind::kAdam, *s);
  return absl::UnimplementedError("unsupported optimizer state (sgd, adam and adamw are)");
}

void WriteParamState(const ParamState& state, std::unique_ptr<OptimizerParamState>* slot) {
  switch (state.kind) {
    case OptimizerKind::kSgd:
      Reuse<SGDParamState>(slot)->momentum_buffer(state.tensors[kMomentumBuffer]);
      return;
    case OptimizerKind::kAdam:
      WriteAdam(state, Reuse<AdamParamState>(slot));
      return;
    case OptimizerKind::kAdamW:
      WriteAdam(state, Reuse<AdamWParamState>(slot));
      return;
  }
}

ParamState NewParamState(const OptimizerStateSpec& spec, const torch::Tensor& param, bool zeroed) {
  ParamState state{spec.kind, 0, std::vector<torch::Tensor>(StateTensorNames(spec.kind).size())};
  for (size_t i = 0; i < spec.live_tensors; ++i) {
    state.tensors[i] = zeroed ? torch::zeros_like(param, torch::MemoryFormat::Preserve)
                              : torch::empty_like(param, torch::MemoryFormat::Preserve);
  }
  return state;
}

int64_t OptimizerStateBytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& [key, entry] : optimizer.state()) {
    if (entry == nullptr) continue;
    auto state = ReadParamState(*entry);
    if (!state.ok()) continue;
    for (const torch::Tensor& t : state->tensors) bytes += Bytes(t);
  }
  return bytes;
}

}  // namespace herd
