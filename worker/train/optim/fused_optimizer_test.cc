// The fused CUDA optimizer step against LibTorch's own optimizers, step by
// step on the same gradients. Runs where CUDA is (the CUDA build on a GPU
// machine: scripts/gpu_check.sh); skips elsewhere. It would have caught the
// step count the kernels read: off by one, AdamW's first update divided by
// a zero bias correction and every parameter became NaN.
#include "worker/train/optim/fused_optimizer.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "worker/train/step/torch_compat.h"

namespace herd {
namespace {

using MakeOptimizer = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

struct Case {
  std::string name;
  MakeOptimizer make;
  bool fused_available;
};

std::vector<torch::Tensor> Parameters(const torch::Device& device) {
  torch::manual_seed(5);
  return {torch::randn({64, 32}, device).requires_grad_(), torch::randn({32}, device).requires_grad_(),
          torch::randn({10, 64}, device).requires_grad_()};
}

void SetGradients(std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (auto& p : params) p.mutable_grad() = torch::randn_like(p);
}

// The same parameters under LibTorch's optimizer (reference) and the fused
// step (fused), stepped on the same gradients.
class FusedOptimizerTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    if (!GetParam().fused_available) GTEST_SKIP() << "this LibTorch has no fused kernel for " << GetParam().name;
    const torch::Device device(torch::kCUDA, 0);
    reference_ = Parameters(device);
    fused_ = Parameters(device);
    reference_optimizer_ = GetParam().make(reference_);
    fused_optimizer_ = GetParam().make(fused_);
  }

  // One step of both on gradients drawn from `seed`; false if the fused path was not taken.
  bool StepBoth(int seed) {
    SetGradients(reference_, seed);
    SetGradients(fused_, seed);
    reference_optimizer_->step();
    return fused_step_.Step(*fused_optimizer_);
  }

  // Same arithmetic, other kernels: equal up to float rounding.
  void ExpectClose(const std::string& when) {
    for (size_t i = 0; i < reference_.size(); ++i) {
      ASSERT_TRUE(fused_[i].isfinite().all().item<bool>()) << when << " parameter " << i;
      EXPECT_TRUE(torch::allclose(fused_[i], reference_[i], /*rtol=*/1e-5, /*atol=*/1e-6))
          << GetParam().name << " " << when << " parameter " << i << ": max difference "
          << (fused_[i] - reference_[i]).abs().max().item<double>();
    }
  }

  std::vector<torch::Tensor> reference_;
  std::vector<torch::Tensor> fused_;
  std::unique_ptr<torch::optim::Optimizer> reference_optimizer_;
  std::unique_ptr<torch::optim::Optimizer> fused_optimizer_;
  FusedOptimizerStep fused_step_;
};

TEST_P(FusedOptimizerTest, MatchesLibTorchsOptimizerStepByStep) {
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(StepBoth(step)) << "the fused path was not taken";
    ExpectClose("step " + std::to_string(step));
  }
}

TEST_P(FusedOptimizerTest, AStepCountRestoredBehindItsBackIsPickedUp) {
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(StepBoth(step));
  // A restore (heal, checkpoint) sets both optimizers' counts back to 1, as
  // if loading an older state; the fused step must use the restored count.
  for (auto* optimizer : {reference_optimizer_.get(), fused_optimizer_.get()}) {
    for (auto& [key, state] : optimizer->state()) {
      if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) adamw->step(1);
      if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state.get())) adam->step(1);
    }
  }
  ASSERT_TRUE(StepBoth(9));
  ExpectClose("after the restore");
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, FusedOptimizerTest,
    ::testing::Values(
        Case{"adamw",
             [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
               return std::make_unique<torch::optim::AdamW>(
                   p, torch::optim::AdamWOptions(1e-3).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01));
             },
             kHaveFusedAdam},
        Case{"adam",
             [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
               return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-3).weight_decay(0.001));
             },
             kHaveFusedAdam},
        Case{"sgd_momentum",
             [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
               return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.05).momentum(0.9));
             },
             kHaveFusedSgd},
        Case{"sgd_plain",
             [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
               return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.05));
             },
             kHaveFusedSgd}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace herd
