#include "worker/train/step/cuda_step_graph.h"

#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

#if defined(HERD_LIBTORCH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace herd {
namespace {

// What every build has: no graph, no device clock.
class NoDeviceTimer : public DeviceIntervalTimer {
 public:
  void Start() override {}
  void Stop() override {}
  std::optional<double> Seconds() override { return std::nullopt; }
};

#if defined(HERD_LIBTORCH_CUDA)

class CudaCapturedStep : public CapturedStep {
 public:
  explicit CudaCapturedStep(const torch::Device& device) : device_(device) {}

  void AllocateInputs(const std::vector<torch::Tensor>& like) override {
    inputs_.clear();
    for (const auto& t : like) inputs_.push_back(torch::empty(t.sizes(), t.options().device(device_)));
  }

  const std::vector<torch::Tensor>& inputs() const override { return inputs_; }

  absl::Status Fill(const std::vector<torch::Tensor>& batch) override {
    if (batch.size() != inputs_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("captured step: ", batch.size(), " batch tensors, the graph has ", inputs_.size()));
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].sizes().equals(inputs_[i].sizes())) {
        return absl::InvalidArgumentError(absl::StrCat("captured step: batch tensor ", i, " has shape ",
                                                       c10::str(batch[i].sizes()), ", the graph's ",
                                                       c10::str(inputs_[i].sizes())));
      }
      inputs_[i].copy_(batch[i], /*non_blocking=*/true);
    }
    return absl::OkStatus();
  }

  absl::Status Capture(const std::function<void()>& step) override {
    graph_.reset();
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
    // The side stream starts after what is queued (the static inputs' fill).
    at::cuda::CUDAEvent queued;
    queued.record(current);
    queued.block(side);
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    std::string error;
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      try {
        // Thread-local: the prefetcher's thread pins batches (cudaHostAlloc)
        // while the step is captured; only this thread must keep to what
        // capture allows.
        graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
        step();
        graph->capture_end();
      } catch (const std::exception& e) {
        error = e.what();
      }
      if (!error.empty()) {
        // A capture cut short leaves the stream capturing: end it and drop
        // what it holds, so the eager steps that follow run.
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(side.stream(), &status) == cudaSuccess &&
            status != cudaStreamCaptureStatusNone) {
          cudaGraph_t partial = nullptr;
          if (cudaStreamEndCapture(side.stream(), &partial) == cudaSuccess && partial != nullptr) {
            cudaGraphDestroy(partial);
          }
        }
        cudaGetLastError();  // the capture's error is reported below, not by the next kernel
      }
    }
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(current);
    if (!error.empty()) return absl::FailedPreconditionError(absl::StrCat("CUDA graph capture failed: ", error));
    graph_ = std::move(graph);
    return absl::OkStatus();
  }

  void Replay() override { graph_->replay(); }
  bool captured() const override { return graph_ != nullptr; }

 private:
  const torch::Device device_;
  std::vector<torch::Tensor> inputs_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

class CudaIntervalTimer : public DeviceIntervalTimer {
 public:
  explicit CudaIntervalTimer(const torch::Device& device)
      : device_(device), start_(cudaEventDefault), stop_(cudaEventDefault) {}

  void Start() override {
    start_.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    started_ = true;
    stopped_ = false;
  }
  void Stop() override {
    if (!started_) return;
    stop_.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    stopped_ = true;
  }
  std::optional<double> Seconds() override {
    if (!started_ || !stopped_) return std::nullopt;
    stop_.synchronize();
    started_ = stopped_ = false;
    return static_cast<double>(start_.elapsed_time(stop_)) / 1000.0;
  }

 private:
  const torch::Device device_;
  at::cuda::CUDAEvent start_;  // timing enabled (cudaEventDefault): the default flags disable it
  at::cuda::CUDAEvent stop_;
  bool started_ = false;
  bool stopped_ = false;
};

#endif  // HERD_LIBTORCH_CUDA

}  // namespace

bool CudaGraphsBuilt() {
#if defined(HERD_LIBTORCH_CUDA)
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<CapturedStep>> MakeCapturedStep(const torch::Device& device) {
  if (!device.is_cuda()) return absl::UnavailableError("CUDA graphs: the device is not cuda");
#if defined(HERD_LIBTORCH_CUDA)
  return std::unique_ptr<CapturedStep>(new CudaCapturedStep(device));
#else
  return absl::UnavailableError("CUDA graphs: unavailable (this build's LibTorch has no CUDA)");
#endif
}

std::unique_ptr<DeviceIntervalTimer> MakeDeviceIntervalTimer(const torch::Device& device) {
#if defined(HERD_LIBTORCH_CUDA)
  if (device.is_cuda()) return std::make_unique<CudaIntervalTimer>(device);
#endif
  (void)device;
  return std::make_unique<NoDeviceTimer>();
}

}  // namespace herd
