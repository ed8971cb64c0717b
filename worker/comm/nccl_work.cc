#include "worker/comm/nccl_work.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/nccl_status.h"

namespace herd {
namespace nccl_internal {
namespace {

// Polling, since CUDA cannot wait on an event with a timeout: a few yields
// for short ops, then sleeps growing to 200 us so a long wait costs little CPU.
class Backoff {
 public:
  void Pause() {
    if (rounds_++ < 32) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::microseconds(200));
  }

 private:
  int rounds_ = 0;
  std::chrono::microseconds pause_{5};
};

}  // namespace

absl::Status NcclWork::ErrorFor(const absl::Status& reason) const {
  if (absl::StartsWith(reason.message(), op_->what)) return reason;  // this op's own failure
  return absl::Status(reason.code(), absl::StrCat(op_->what, " did not complete: ", reason.message()));
}

absl::Status NcclWork::Wait() {
  if (op_->succeeded.load(std::memory_order_acquire)) return absl::OkStatus();
  ScopedDevice device(state_->device());
  if (!device.status().ok()) return device.status();

  // GPU side: the trainer's later kernels read the op's result.
  if (!state_->is_broken()) {
    const cudaError_t error = cudaStreamWaitEvent(compute_stream_, op_->done, 0);
    if (error != cudaSuccess) {
      cudaGetLastError();
      state_->Fail(CudaStatus(error, absl::StrCat(op_->what, ": ordering the compute stream after it"),
                              state_->device()));
    }
  }

  // Host side: wait, bounded by the op's deadline.
  Backoff backoff;
  for (;;) {
    if (op_->succeeded.load(std::memory_order_acquire)) return absl::OkStatus();
    if (state_->is_broken()) return ErrorFor(state_->broken());
    const cudaError_t state = cudaEventQuery(op_->done);
    if (state == cudaSuccess) {
      // Without blocking behind another thread that is queuing an op.
      bool checked = false;
      const absl::Status health = state_->CheckAsyncError(/*wait_for_lock=*/false, &checked);
      if (!health.ok()) return ErrorFor(health);
      if (checked) {
        op_->succeeded.store(true, std::memory_order_release);
        return absl::OkStatus();
      }
      backoff.Pause();
      continue;
    }
    if (state != cudaErrorNotReady) {
      cudaGetLastError();
      state_->Fail(CudaStatus(state, absl::StrCat(op_->what, ": waiting for it"), state_->device()));
      continue;
    }
    if (Clock::now() >= op_->deadline) {
      state_->Fail(state_->TimeoutError(op_->what));
      continue;
    }
    backoff.Pause();
  }
}

bool NcclWork::Done() const {
  if (op_->succeeded.load(std::memory_order_acquire) || state_->is_broken()) return true;
  return cudaEventQuery(op_->done) != cudaErrorNotReady;
}

}  // namespace nccl_internal
}  // namespace herd
