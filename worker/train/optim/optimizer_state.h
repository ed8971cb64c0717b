// The one place that knows what an optimizer keeps per parameter and how
// LibTorch stores it: a typed state object per parameter (SGDParamState,
// AdamParamState, AdamWParamState) in Optimizer::state(), keyed as
// torch_compat.h says. The snapshot (copy, restore), ZeRO-1 sharding (cut a
// piece, gather the whole) and the fused CUDA step read and write a
// parameter's state through ParamState, never through the typed objects, so
// an optimizer herd adds is described here once.
//
// Nothing here changes what LibTorch's optimizer holds: the objects written
// are LibTorch's own types, so Optimizer::save (the checkpoint format) and
// a later unfused step see exactly what they would have.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd {

// The optimizers herd supports (optimizer_factory.h builds them).
enum class OptimizerKind { kSgd, kAdam, kAdamW };

// The names of `kind`'s per-parameter state tensors, LibTorch's and
// PyTorch's field names, in the fixed order ParamState::tensors uses:
// SGD: momentum_buffer; Adam, AdamW: exp_avg, exp_avg_sq, max_exp_avg_sq.
// Each is shaped, typed and placed like its parameter.
const std::vector<std::string>& StateTensorNames(OptimizerKind kind);

// Indices into ParamState::tensors by name.
constexpr size_t kMomentumBuffer = 0;  // SGD
constexpr size_t kExpAvg = 0;          // Adam, AdamW
constexpr size_t kExpAvgSq = 1;
constexpr size_t kMaxExpAvgSq = 2;

// Whether `kind` keeps a step count per parameter (Adam, AdamW; SGD none).
bool CountsSteps(OptimizerKind kind);

// What an optimizer configured so keeps per parameter: its kind and how
// many of the kind's tensors it fills, the first `live_tensors` names
// (amsgrad adds max_exp_avg_sq; SGD's momentum buffer exists only with
// momentum, LibTorch keeps no state at all without).
struct OptimizerStateSpec {
  OptimizerKind kind = OptimizerKind::kSgd;
  size_t live_tensors = 0;
};

// The spec of a parameter group with these options. UNIMPLEMENTED for an
// optimizer other than sgd, adam and adamw.
absl::StatusOr<OptimizerStateSpec> StateSpecOf(const torch::optim::OptimizerOptions& options);

// One parameter's state as handles: `tensors` share storage with the state
// they were read from (StateTensorNames(kind) order, every name present,
// undefined where LibTorch has none); `step` is the count of updates taken
// (0 for SGD, which keeps none).
struct ParamState {
  OptimizerKind kind = OptimizerKind::kSgd;
  int64_t step = 0;
  std::vector<torch::Tensor> tensors;
};

// Reads LibTorch's typed state. UNIMPLEMENTED for a state type herd does
// not support.
absl::StatusOr<ParamState> ReadParamState(const torch::optim::OptimizerParamState& state);

// Writes `state` into `slot` as LibTorch's typed state (tensors shared, not
// copied): into the object there when it is of the kind's type, else into a
// new one.
void WriteParamState(const ParamState& state, std::unique_ptr<torch::optim::OptimizerParamState>* slot);

// A parameter's first state under `spec`: its live tensors made like
// `param` (same shape, dtype, device and memory layout), zero-filled with
// `zeroed` (what LibTorch's first step makes) or left uninitialized for a
// caller who fills them, the rest undefined; step 0.
ParamState NewParamState(const OptimizerStateSpec& spec, const torch::Tensor& param, bool zeroed);

// A copy of `state` whose tensors are fn(tensor) for every defined one
// (undefined ones stay undefined): the same kind and step.
template <typename Fn>
ParamState MapStateTensors(const ParamState& state, Fn&& fn) {
  ParamState out = state;
  for (torch::Tensor& t : out.tensors) {
    if (t.defined()) t = fn(t);
  }
  return out;
}

// Bytes of optimizer state held (every state tensor of every entry).
int64_t OptimizerStateBytes(torch::optim::Optimizer& optimizer);

}  // namespace herd
