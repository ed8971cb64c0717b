// Without CUDA (the CPU build, or a cpu device), capture is "unavailable"
// and the device timer measures nothing: the trainer then runs eagerly.
// cuda_graph_replay_test covers the GPU.
#include "worker/train/step/cuda_step_graph.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace herd {
namespace {

TEST(CudaStepGraph, CpuDeviceIsUnavailableAndUntimed) {
  auto step = MakeCapturedStep(torch::Device(torch::kCPU));
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kUnavailable);
  auto timer = MakeDeviceIntervalTimer(torch::Device(torch::kCPU));
  timer->Start();
  timer->Stop();
  EXPECT_FALSE(timer->Seconds().has_value());
}

TEST(CudaStepGraph, BuildWithoutCudaSaysSo) {
  if (CudaGraphsBuilt()) GTEST_SKIP() << "a CUDA build: the GPU case below covers it";
  auto step = MakeCapturedStep(torch::Device(torch::kCUDA, 0));
  ASSERT_FALSE(step.ok());
  EXPECT_NE(std::string(step.status().message()).find("unavailable"), std::string::npos);
}

}  // namespace
}  // namespace herd
