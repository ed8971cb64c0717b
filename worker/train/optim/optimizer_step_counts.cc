#include "worker/train/optim/optimizer_step_counts.h"

#include <algorithm>

#include "worker/train/optim/optimizer_state.h"

namespace herd {
namespace {

// Sets the count of the state at `key` to `step`, where it has one.
void SetCount(torch::optim::Optimizer& optimizer, const OptimizerStateKeyType& key, int64_t step, bool add) {
  auto found = optimizer.state().find(key);
  if (found == optimizer.state().end() || found->second == nullptr) return;
  auto state = ReadParamState(*found->second);
  if (!state.ok()) return;
  state->step = add ? state->step + step : step;
  WriteParamState(*state, &found->second);
}

}  // namespace

StepCounts ReadStepCounts(torch::optim::Optimizer& optimizer) {
  StepCounts counts;
  for (const auto& [key, slot] : optimizer.state()) {
    if (slot == nullptr) continue;
    auto state = ReadParamState(*slot);
    if (state.ok()) counts.emplace_back(key, state->step);
  }
  return counts;
}

std::vector<OptimizerStateKeyType> AdvancedStates(const StepCounts& before, const StepCounts& after) {
  std::vector<OptimizerStateKeyType> advanced;
  for (const auto& [key, step] : after) {
    auto was = std::find_if(before.begin(), before.end(), [&](const auto& b) { return b.first == key; });
    if (was == before.end() || was->second != step) advanced.push_back(key);
  }
  return advanced;
}

void AdvanceStepCounts(const std::vector<OptimizerStateKeyType>& states, torch::optim::Optimizer& optimizer) {
  for (const auto& key : states) SetCount(optimizer, key, 1, /*add=*/true);
}

void RestoreStepCounts(const StepCounts& counts, torch::optim::Optimizer& optimizer) {
  for (const auto& [key, step] : counts) SetCount(optimizer, key, step, /*add=*/false);
}

}  // namespace herd
