// CUDA and NCCL results as absl::Status, with the device and the library's
// own words in the message; and the scoped device switch every entry point
// uses. Internal to //worker/comm:nccl_communicator.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace herd {
namespace nccl_internal {

static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0),
              "herd needs NCCL 2.14+ (non-blocking communicators); third_party/cuda.bzl should have said so");

// "<what> on CUDA device <device>: <cuda message> (<cudaErrorName>)".
absl::Status CudaStatus(cudaError_t error, absl::string_view what, int device,
                        absl::StatusCode code = absl::StatusCode::kInternal);

// "<what>: <NCCL message> (<ncclResult>)[: <ncclGetLastError>]", coded by
// CodeForNccl. `comm` may be null.
absl::Status NcclStatus(ncclResult_t result, absl::string_view what, ncclComm_t comm);

// Errors that mean a peer or the network failed are UNAVAILABLE (a new
// rendezvous may succeed); bad arguments are INVALID_ARGUMENT; the rest INTERNAL.
absl::StatusCode CodeForNccl(ncclResult_t result);

// FAILED_PRECONDITION (no driver, no device, cudaSetDevice failed) or
// INVALID_ARGUMENT (index out of range), naming the device; OK otherwise.
absl::Status CheckDeviceUsable(int device);

// Makes `device` current for the scope and restores the caller's device
// after, so herd never changes the device a trainer thread works on.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  absl::Status status_;
};

}  // namespace nccl_internal
}  // namespace herd
