// The optimizers' host-side step counts (Adam, AdamW: `step` per
// parameter) around a captured step. The fused kernels count on the device;
// the host's counts, which commits and checkpoints save, advance only when
// the step's host code runs: at capture, not at a replay. So the counts a
// capture moved are noted and moved again after every replay, and a capture
// that failed puts them back.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "worker/train/step/torch_compat.h"

namespace herd {

// Each parameter state's step count, by state key; states without a
// readable count are left out.
using StepCounts = std::vector<std::pair<OptimizerStateKeyType, int64_t>>;
StepCounts ReadStepCounts(torch::optim::Optimizer& optimizer);

// The states whose count differs between `before` and `after` (or that
// `after` has and `before` lacks): those one step advanced.
std::vector<OptimizerStateKeyType> AdvancedStates(const StepCounts& before, const StepCounts& after);

// Adds 1 to the count of each of `states` (a replay of the step that advanced them).
void AdvanceStepCounts(const std::vector<OptimizerStateKeyType>& states, torch::optim::Optimizer& optimizer);

// Puts `counts` back (a capture that failed ran none of its step).
void RestoreStepCounts(const StepCounts& counts, torch::optim::Optimizer& optimizer);

}  // namespace herd
