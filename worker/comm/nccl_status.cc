#include "worker/comm/nccl_status.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace herd {
namespace nccl_internal {

absl::Status CudaStatus(cudaError_t error, absl::string_view what, int device, absl::StatusCode code) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::Status(code, absl::StrCat(what, " on CUDA device ", device, ": ", cudaGetErrorString(error), " (",
                                         cudaGetErrorName(error), ")"));
}

absl::StatusCode CodeForNccl(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return absl::StatusCode::kOk;
    case ncclSystemError:  // sockets and system calls: usually a peer went away
    case ncclRemoteError:
      return absl::StatusCode::kUnavailable;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

namespace {

const char* NcclResultName(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult?";
  }
}

}  // namespace

absl::Status NcclStatus(ncclResult_t result, absl::string_view what, ncclComm_t comm) {
  if (result == ncclSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": ", ncclGetErrorString(result), " (", NcclResultName(result), ")");
  // The last error text is the useful part ("socket closed by peer ..."), but
  // may be stale; NCCL keeps it per thread.
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') absl::StrAppend(&message, ": ", detail);
  return absl::Status(CodeForNccl(result), message);
}

absl::Status CheckDeviceUsable(int device) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // not sticky; do not leave it for the caller's next CUDA call
    return CudaStatus(error, "nccl: cannot count CUDA devices (no GPU or no driver?) while looking for device", device,
                      absl::StatusCode::kFailedPrecondition);
  }
  if (count == 0) {
    return absl::FailedPreconditionError(absl::StrCat("nccl: CUDA device ", device, " requested but no CUDA device is visible"));
  }
  if (device < 0 || device >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::InvalidArgumentError(absl::StrCat("nccl: CUDA device ", device, " does not exist: ", count,
                                                   " visible (CUDA_VISIBLE_DEVICES=", visible ? visible : "<unset>",
                                                   ")"));
  }
  ScopedDevice scoped(device);
  return scoped.status();
}

ScopedDevice::ScopedDevice(int device) {
  cudaError_t error = cudaGetDevice(&previous_);
  if (error == cudaSuccess && previous_ == device) return;
  error = cudaSetDevice(device);
  if (error != cudaSuccess) {
    cudaGetLastError();
    status_ = CudaStatus(error, "nccl: cudaSetDevice failed", device, absl::StatusCode::kFailedPrecondition);
    return;
  }
  switched_ = previous_ >= 0;
}

ScopedDevice::~ScopedDevice() {
  if (switched_) cudaSetDevice(previous_);
}

}  // namespace nccl_internal
}  // namespace herd
