// A captured step against the eager one, step by step, on the GPU (part of
// scripts/gpu_check.sh; skipped without the CUDA build and a GPU, which
// fails a cuda check). The step: SGD on a linear least-squares model, its
// batch from pinned host memory through the static input buffer. The same
// kernels run on the same inputs, so every step's parameters must be
// bitwise equal.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "worker/train/step/cuda_step_graph.h"

namespace herd {
namespace {

void SgdStep(torch::Tensor w, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  const torch::Tensor g = x.t().matmul(x.matmul(w)).div(x.size(0));  // d/dw of ||xw||^2 / (2 rows)
  w.sub_(g, 0.01);
}

TEST(CudaGraphReplay, CapturedStepsMatchEagerStepsBitwise) {
  if (!CudaGraphsBuilt() || !torch::cuda::is_available()) GTEST_SKIP() << "needs the CUDA build and a GPU";
  const torch::Device cuda(torch::kCUDA, 0);
  torch::manual_seed(1);
  const torch::Tensor w0 = torch::randn({256, 64}, cuda);
  std::vector<torch::Tensor> batches;
  for (int i = 0; i < 12; ++i) batches.push_back(torch::randn({32, 256}).pin_memory());

  torch::Tensor eager = w0.clone();
  torch::Tensor captured = w0.clone();
  auto made = MakeCapturedStep(cuda);
  ASSERT_TRUE(made.ok()) << made.status();
  CapturedStep& step = **made;
  step.AllocateInputs({batches[0]});
  for (size_t i = 0; i < batches.size(); ++i) {
    SgdStep(eager, batches[i].to(cuda, /*non_blocking=*/true));
    if (i < 2) {
      SgdStep(captured, batches[i].to(cuda, /*non_blocking=*/true));  // warmup, eager
    } else {
      ASSERT_TRUE(step.Fill({batches[i]}).ok());
      if (!step.captured()) {
        ASSERT_TRUE(step.Capture([&] { SgdStep(captured, step.inputs()[0]); }).ok());
      }
      step.Replay();
    }
    ASSERT_TRUE(torch::equal(captured, eager)) << "step " << i << ": max difference "
                                               << (captured - eager).abs().max().item<float>();
  }
  // Another batch shape is not this graph's: the trainer re-captures or runs eagerly instead.
  EXPECT_FALSE(step.Fill({torch::zeros({3, 256}).pin_memory()}).ok());

  auto timer = MakeDeviceIntervalTimer(cuda);
  timer->Start();
  for (int i = 0; i < 10; ++i) step.Replay();
  timer->Stop();
  const auto seconds = timer->Seconds();
  ASSERT_TRUE(seconds.has_value());
  EXPECT_GT(*seconds, 0.0);
}

// A step that syncs with the host cannot be captured: the error is
// reported, no graph is left, and eager steps still run afterwards.
TEST(CudaGraphReplay, AHostSyncInTheStepFailsCaptureCleanly) {
  if (!CudaGraphsBuilt() || !torch::cuda::is_available()) GTEST_SKIP() << "needs the CUDA build and a GPU";
  const torch::Device cuda(torch::kCUDA, 0);
  torch::Tensor w = torch::ones({8, 8}, cuda);
  auto made = MakeCapturedStep(cuda);
  ASSERT_TRUE(made.ok()) << made.status();
  const absl::Status s = (*made)->Capture([&] { (void)w.sum().item<float>(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_FALSE((*made)->captured());
  SgdStep(w, torch::ones({4, 8}, cuda));
  EXPECT_TRUE(torch::isfinite(w).all().item<bool>());
}

}  // namespace
}  // namespace herd
