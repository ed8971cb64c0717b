// nccl_communicator.h and nccl_device.h for a build without NCCL: the same
// API, every entry point UNIMPLEMENTED with what third_party/cuda.bzl did not
// find. worker/comm/BUILD picks this file or the NCCL sources, nothing else.
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/nccl_device.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "herd_cuda/config.h"

namespace herd {
namespace {

absl::Status Unavailable() {
  const std::string reason = herd_cuda_config::kNcclUnavailableReason[0] != '\0'
                                 ? herd_cuda_config::kNcclUnavailableReason
                                 : "built with --@cuda//:have_nccl=false";
  return absl::UnimplementedError(absl::StrCat("herd was built without NCCL (", reason,
                                               "); see worker/comm/README.md for pointing HERD_CUDA at CUDA"));
}

}  // namespace

absl::Status NcclBuildStatus() { return Unavailable(); }

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions&,
                                                                     std::shared_ptr<RendezvousStore>) {
  return Unavailable();
}

absl::StatusOr<int> CudaDeviceCount() { return Unavailable(); }

absl::StatusOr<std::string> CudaDeviceName(int) { return Unavailable(); }

absl::StatusOr<int> NcclRuntimeVersion() { return Unavailable(); }

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(int, size_t) { return Unavailable(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_), data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  device_ = other.device_;
  data_ = std::exchange(other.data_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  return *this;
}

DeviceBuffer::~DeviceBuffer() = default;  // Allocate never succeeds here

absl::Status DeviceBuffer::CopyFromHost(const void*, size_t) { return Unavailable(); }

absl::Status DeviceBuffer::CopyToHost(void*, size_t) const { return Unavailable(); }

absl::Status StallStream(int, void*, std::chrono::milliseconds) { return Unavailable(); }

}  // namespace herd
