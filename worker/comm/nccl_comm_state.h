// The health of one NCCL communicator, shared by it and the Work handles it
// returns (which may outlive it): the ncclComm_t and the lock that serializes
// calls on it, the rule that the first failure breaks it for good, the ops in
// flight, and the watchdog loop that enforces their timeouts and polls NCCL
// for asynchronous errors even when nobody waits. Internal to
// //worker/comm:nccl_communicator.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace herd {
namespace nccl_internal {

using Clock = std::chrono::steady_clock;

// One collective queued on the communicator's stream.
struct NcclOp {
  NcclOp(std::string what, Clock::time_point deadline, cudaEvent_t done)
      : what(std::move(what)), deadline(deadline), done(done) {}
  ~NcclOp() { cudaEventDestroy(done); }  // fine while pending: CUDA releases it on completion
  NcclOp(const NcclOp&) = delete;
  NcclOp& operator=(const NcclOp&) = delete;

  const std::string what;  // "nccl all-reduce #3 of 1024 float32 (rank 0 of 2, CUDA device 0)"
  const Clock::time_point deadline;
  const cudaEvent_t done;  // recorded on the communicator's stream right after the op
  // Set once the op is known to have finished before any failure. After an
  // abort `done` completes too (NCCL's kernels quit), so only this flag says
  // the data is good.
  std::atomic<bool> succeeded{false};
};

class NcclCommState {
 public:
  // Takes ownership of `comm`.
  NcclCommState(ncclComm_t comm, int device, std::chrono::milliseconds timeout, std::string name);
  ~NcclCommState();  // aborts NCCL if Close() never ran
  NcclCommState(const NcclCommState&) = delete;
  NcclCommState& operator=(const NcclCommState&) = delete;

  int device() const { return device_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& name() const { return name_; }  // "rank 0 of 2, CUDA device 0"

  // Runs `fn(comm)` under the lock that serializes NCCL calls; fails with
  // ABORTED instead once the communicator is broken or closed. `fn` must
  // return promptly once is_broken() turns true, since aborting needs the lock.
  template <typename Fn>
  absl::Status WithComm(Fn&& fn) {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (comm_ == nullptr || is_broken()) return BrokenError();
    return fn(comm_);
  }

  // The first failure, or OK while healthy.
  absl::Status broken() const;
  bool is_broken() const { return broken_flag_.load(std::memory_order_acquire); }
  // ABORTED "the communicator is broken by an earlier failure: ...".
  absl::Status BrokenError() const;
  // DEADLINE_EXCEEDED for an op that overran the timeout.
  absl::Status TimeoutError(const std::string& what) const;

  // Records the first failure and has the watchdog abort NCCL (so callers
  // return at once, however long the abort takes). Later calls do nothing.
  void Fail(absl::Status reason);

  // Asks NCCL for an asynchronous error; on one, Fail()s. Returns broken().
  // With wait_for_lock false it gives up when another thread holds the NCCL
  // lock. Sets *checked to whether the answer is known (asked, or closed).
  absl::Status CheckAsyncError(bool wait_for_lock, bool* checked = nullptr);

  void Track(std::shared_ptr<NcclOp> op);

  // Retires finished ops and fails the communicator when the oldest one
  // overran its deadline or CUDA reports an error.
  void Sweep(bool wait_for_lock);

  // Runs on the watchdog thread until StopWatchdog().
  void WatchdogLoop(std::chrono::milliseconds interval);
  void StopWatchdog();

  // Returns once no op is in flight or the communicator broke; each op is
  // bounded by its deadline.
  void Drain();

  // Releases NCCL: a clean finalize + destroy while healthy (bounded by the
  // timeout), else an abort. Call after the watchdog stopped. Returns whether
  // the release was clean.
  bool Close();

 private:
  void AbortNow();

  const int device_;
  const std::chrono::milliseconds timeout_;
  const std::string name_;

  std::mutex nccl_mu_;  // serializes every NCCL call on comm_
  ncclComm_t comm_;     // null once aborted or closed

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_;
  absl::Status broken_;
  std::atomic<bool> broken_flag_{false};
  bool abort_requested_ = false;
  bool stopping_ = false;
  std::deque<std::shared_ptr<NcclOp>> in_flight_;  // issue order
};

}  // namespace nccl_internal
}  // namespace herd
