// The parts of `cuda_graphs` and of GPU time per step that need CUDA:
// capturing and replaying a step as a CUDA graph, and timing a stretch of
// the device's stream with events. Compiled in both build variants; against
// a LibTorch without CUDA, CudaGraphsBuilt() is false, MakeCapturedStep
// answers UNAVAILABLE and the device timer measures nothing. The decisions
// (when to capture, when to fall back) are step_capture_policy.h's.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace herd {

// Whether this build's LibTorch has CUDA (and so CUDA graphs).
bool CudaGraphsBuilt();

// One training step as a CUDA graph. Its inputs are static device buffers:
// Fill copies each step's batch into them (one async copy per tensor, on
// the current stream, from the prefetcher's pinned memory), then Replay
// runs the graph on the current stream.
class CapturedStep {
 public:
  virtual ~CapturedStep() = default;
  // Static buffers shaped and typed like `like`, on the step's device; the
  // step given to Capture must read its batch from inputs().
  virtual void AllocateInputs(const std::vector<torch::Tensor>& like) = 0;
  virtual const std::vector<torch::Tensor>& inputs() const = 0;
  // Copies `batch` into inputs() (same shapes), non_blocking.
  virtual absl::Status Fill(const std::vector<torch::Tensor>& batch) = 0;
  // Runs `step` under capture on a side stream that first waits for the
  // current stream's work; the captured work has not run yet: Replay it.
  // An error (the step syncs with the host, an op that cannot be captured)
  // leaves no graph and FAILED_PRECONDITION naming it.
  virtual absl::Status Capture(const std::function<void()>& step) = 0;
  virtual void Replay() = 0;
  virtual bool captured() const = 0;
};

// UNAVAILABLE where this build has no CUDA or `device` is not cuda.
absl::StatusOr<std::unique_ptr<CapturedStep>> MakeCapturedStep(const torch::Device& device);

// Device time between Start and Stop on the current stream (CUDA events),
// for GPU time per step at the log interval. Seconds() waits for Stop's
// event; nullopt on the CPU, in a build without CUDA, or before a Start
// and Stop pair.
class DeviceIntervalTimer {
 public:
  virtual ~DeviceIntervalTimer() = default;
  virtual void Start() = 0;
  virtual void Stop() = 0;
  virtual std::optional<double> Seconds() = 0;
};

std::unique_ptr<DeviceIntervalTimer> MakeDeviceIntervalTimer(const torch::Device& device);

}  // namespace herd
