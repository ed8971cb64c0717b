// Work handles the NCCL communicator returns. Internal to
// //worker/comm:nccl_communicator.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"
#include "worker/comm/nccl_comm_state.h"

namespace herd {
namespace nccl_internal {

// An op queued on the GPU. Wait() orders the compute stream after it and
// blocks until it finishes, the communicator breaks, or its deadline passes
// (which breaks the communicator).
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommState> state, std::shared_ptr<NcclOp> op, cudaStream_t compute_stream)
      : state_(std::move(state)), op_(std::move(op)), compute_stream_(compute_stream) {}

  absl::Status Wait() override;
  bool Done() const override;

 private:
  // `reason` as this op's error: pending ops share the communicator's failure.
  absl::Status ErrorFor(const absl::Status& reason) const;

  const std::shared_ptr<NcclCommState> state_;
  const std::shared_ptr<NcclOp> op_;
  const cudaStream_t compute_stream_;
};

// An op that never reached the GPU: refused (broken communicator, bad
// arguments) or with nothing to do.
class FinishedWork : public Work {
 public:
  explicit FinishedWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }
  bool Done() const override { return true; }

 private:
  const absl::Status status_;
};

}  // namespace nccl_internal
}  // namespace herd
