// The host's step counts around a captured step, on LibTorch's own
// optimizers (CPU): a capture's advance is found, repeated per replay, and
// a failed capture's is undone.
#include "worker/train/optim/optimizer_step_counts.h"

#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <vector>

namespace herd {
namespace {

std::vector<torch::Tensor> Params() {
  torch::manual_seed(3);
  std::vector<torch::Tensor> params = {torch::randn({4, 3}).requires_grad_(), torch::randn({3}).requires_grad_(),
                                       torch::randn({2}).requires_grad_()};
  return params;
}

void Step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params, size_t with_grads) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = i < with_grads ? torch::ones_like(params[i]) : torch::Tensor();
  }
  optimizer.step();
}

int64_t CountOf(const StepCounts& counts, const OptimizerStateKeyType& key) {
  for (const auto& [k, step] : counts) {
    if (k == key) return step;
  }
  return -1;
}

TEST(OptimizerStepCounts, ReplaysAdvanceWhatTheCaptureAdvancedAndAFailureIsUndone) {
  std::vector<torch::Tensor> params = Params();
  torch::optim::Adam adam(params, torch::optim::AdamOptions(0.1));
  Step(adam, params, 3);  // warmup: every parameter at 1
  const StepCounts before = ReadStepCounts(adam);
  ASSERT_EQ(before.size(), 3u);
  Step(adam, params, 2);  // "the capture": the last parameter has no gradient, no update
  const std::vector<OptimizerStateKeyType> advanced = AdvancedStates(before, ReadStepCounts(adam));
  ASSERT_EQ(advanced.size(), 2u);
  for (int replay = 0; replay < 3; ++replay) AdvanceStepCounts(advanced, adam);
  const StepCounts after = ReadStepCounts(adam);
  EXPECT_EQ(CountOf(after, OptimizerStateKey(params[0])), 5);  // warmup, capture, 3 replays
  EXPECT_EQ(CountOf(after, OptimizerStateKey(params[1])), 5);
  EXPECT_EQ(CountOf(after, OptimizerStateKey(params[2])), 1) << "not in the graph's update: never advanced";
  // What LibTorch's own steps leave after the same updates.
  std::vector<torch::Tensor> twins = Params();
  torch::optim::Adam stepped(twins, torch::optim::AdamOptions(0.1));
  Step(stepped, twins, 3);
  for (int i = 0; i < 4; ++i) Step(stepped, twins, 2);
  const StepCounts own = ReadStepCounts(stepped);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(CountOf(after, OptimizerStateKey(params[i])), CountOf(own, OptimizerStateKey(twins[i]))) << i;
  }
  RestoreStepCounts(before, adam);
  for (const auto& [key, step] : ReadStepCounts(adam)) EXPECT_EQ(step, 1) << "a failed capture ran none of its step";
}

TEST(OptimizerStepCounts, SgdHasNoCountToAdvance) {
  std::vector<torch::Tensor> params = Params();
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  Step(sgd, params, 3);
  const StepCounts before = ReadStepCounts(sgd);
  Step(sgd, params, 3);
  EXPECT_TRUE(AdvancedStates(before, ReadStepCounts(sgd)).empty());
}

}  // namespace
}  // namespace herd
