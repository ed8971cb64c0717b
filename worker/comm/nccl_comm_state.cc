#include "worker/comm/nccl_comm_state.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/comm/nccl_status.h"

namespace herd {
namespace nccl_internal {

NcclCommState::NcclCommState(ncclComm_t comm, int device, std::chrono::milliseconds timeout, std::string name)
    : device_(device), timeout_(timeout), name_(std::move(name)), comm_(comm) {}

NcclCommState::~NcclCommState() { AbortNow(); }

absl::Status NcclCommState::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

absl::Status NcclCommState::BrokenError() const {
  absl::Status first = broken();
  if (first.ok()) return absl::AbortedError(absl::StrCat("nccl (", name_, "): the communicator is closed"));
  return absl::AbortedError(absl::StrCat("the communicator is broken by an earlier failure: ", first.ToString()));
}

absl::Status NcclCommState::TimeoutError(const std::string& what) const {
  return absl::DeadlineExceededError(absl::StrCat(what, " did not finish within ", timeout_.count(),
                                                  " ms of being issued; aborted the NCCL communicator "
                                                  "(a peer is slow, hung or gone)"));
}

void NcclCommState::Fail(absl::Status reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return;
    broken_ = std::move(reason);
    broken_flag_.store(true, std::memory_order_release);
    abort_requested_ = true;
  }
  wake_.notify_all();
}

absl::Status NcclCommState::CheckAsyncError(bool wait_for_lock, bool* checked) {
  if (checked != nullptr) *checked = false;
  absl::Status error;
  {
    std::unique_lock<std::mutex> lock(nccl_mu_, std::defer_lock);
    if (wait_for_lock) {
      lock.lock();
    } else if (!lock.try_lock()) {
      return broken();
    }
    if (is_broken()) return broken();
    if (comm_ == nullptr) {  // closed cleanly: nothing more can go wrong
      if (checked != nullptr) *checked = true;
      return absl::OkStatus();
    }
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) state = result;
    if (checked != nullptr) *checked = true;
    // ncclInProgress: a non-blocking call is still being set up, not an error.
    if (state == ncclSuccess || state == ncclInProgress) return broken();
    error = NcclStatus(state, absl::StrCat("nccl (", name_, "): asynchronous NCCL error"), comm_);
  }
  Fail(error);
  return broken();
}

void NcclCommState::Track(std::shared_ptr<NcclOp> op) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.push_back(std::move(op));
}

void NcclCommState::Sweep(bool wait_for_lock) {
  if (is_broken()) return;
  std::vector<std::shared_ptr<NcclOp>> finished;
  absl::Status failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Ops finish in issue order (one stream), so the oldest decides.
    while (!in_flight_.empty()) {
      const std::shared_ptr<NcclOp>& op = in_flight_.front();
      const cudaError_t state = cudaEventQuery(op->done);
      if (state == cudaSuccess) {
        finished.push_back(op);
        in_flight_.pop_front();
        continue;
      }
      if (state != cudaErrorNotReady) {
        cudaGetLastError();
        failure = CudaStatus(state, absl::StrCat(op->what, ": waiting for it"), device_);
      } else if (Clock::now() >= op->deadline) {
        failure = TimeoutError(op->what);
      }
      break;
    }
  }
  if (!failure.ok()) {
    Fail(failure);
    return;
  }
  // An op's event can complete after NCCL hit an error, so an op counts as a
  // success only when NCCL reports no error after its event completed.
  bool checked = false;
  const absl::Status health = CheckAsyncError(wait_for_lock, &checked);
  if (checked && health.ok()) {
    for (const auto& op : finished) op->succeeded.store(true, std::memory_order_release);
  }
}

void NcclCommState::WatchdogLoop(std::chrono::milliseconds interval) {
  // CUDA calls on this thread go to the communicator's device.
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, interval, [&] { return stopping_ || abort_requested_; });
    if (stopping_) break;
    const bool abort = abort_requested_;
    abort_requested_ = false;
    lock.unlock();
    if (abort) {
      AbortNow();
    } else {
      Sweep(/*wait_for_lock=*/false);  // a thread queuing an op holds the lock only briefly
    }
    lock.lock();
  }
}

void NcclCommState::StopWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
}

void NcclCommState::Drain() {
  for (;;) {
    if (is_broken()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (in_flight_.empty()) return;
    }
    Sweep(/*wait_for_lock=*/true);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool NcclCommState::Close() {
  if (is_broken()) {
    AbortNow();
    return false;
  }
  std::lock_guard<std::mutex> lock(nccl_mu_);
  if (comm_ == nullptr) return true;
  ScopedDevice device(device_);
  // Finalize flushes NCCL's own work and meets the other local ranks; it can
  // wait on peers, so it gets the timeout like everything else.
  ncclResult_t state = ncclCommFinalize(comm_);
  const Clock::time_point deadline = Clock::now() + timeout_;
  while (state == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclResult_t async = ncclSuccess;
    state = ncclCommGetAsyncError(comm_, &async);
    if (state == ncclSuccess) state = async;
  }
  const bool clean = state == ncclSuccess;
  if (clean) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
  return clean;
}

void NcclCommState::AbortNow() {
  std::lock_guard<std::mutex> lock(nccl_mu_);
  if (comm_ == nullptr) return;
  ScopedDevice device(device_);
  // The result does not matter: the communicator is unusable either way.
  ncclCommAbort(comm_);
  comm_ = nullptr;
}

}  // namespace nccl_internal
}  // namespace herd
