// The CUDA build of nccl_device.h (nccl_unavailable.cc is the other).
#include "worker/comm/nccl_device.h"

#include <cuda_runtime.h>

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/comm/nccl_status.h"

namespace herd {

using nccl_internal::CudaStatus;
using nccl_internal::ScopedDevice;

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("cudaGetDeviceCount failed: ", cudaGetErrorString(error), " (",
                                                      cudaGetErrorName(error), ")"));
  }
  return count;
}

absl::StatusOr<std::string> CudaDeviceName(int device) {
  cudaDeviceProp properties;
  const cudaError_t error = cudaGetDeviceProperties(&properties, device);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(error, "cudaGetDeviceProperties", device, absl::StatusCode::kFailedPrecondition);
  }
  return absl::StrCat(properties.name, " (sm_", properties.major, properties.minor, ")");
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(int device, size_t bytes) {
  ScopedDevice scoped(device);
  if (!scoped.status().ok()) return scoped.status();
  void* data = nullptr;
  const cudaError_t error = cudaMalloc(&data, bytes);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(error, absl::StrCat("cudaMalloc of ", bytes, " bytes"), device,
                      error == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted
                                                         : absl::StatusCode::kInternal);
  }
  return DeviceBuffer(device, data, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_), data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    DeviceBuffer old(std::move(*this));
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr) return;
  ScopedDevice scoped(device_);
  cudaFree(data_);
}

absl::Status DeviceBuffer::CopyFromHost(const void* source, size_t bytes) {
  if (bytes > bytes_) return absl::InvalidArgumentError(absl::StrCat("copy of ", bytes, " bytes into ", bytes_));
  ScopedDevice scoped(device_);
  if (!scoped.status().ok()) return scoped.status();
  const cudaError_t error = cudaMemcpy(data_, source, bytes, cudaMemcpyHostToDevice);
  if (error != cudaSuccess) cudaGetLastError();
  return CudaStatus(error, "copying to the device", device_);
}

absl::Status DeviceBuffer::CopyToHost(void* destination, size_t bytes) const {
  if (bytes > bytes_) return absl::InvalidArgumentError(absl::StrCat("copy of ", bytes, " bytes out of ", bytes_));
  ScopedDevice scoped(device_);
  if (!scoped.status().ok()) return scoped.status();
  const cudaError_t error = cudaMemcpy(destination, data_, bytes, cudaMemcpyDeviceToHost);
  if (error != cudaSuccess) cudaGetLastError();
  return CudaStatus(error, "copying from the device", device_);
}

namespace {

void SleepOnHost(void* milliseconds) {
  auto* duration = static_cast<std::chrono::milliseconds*>(milliseconds);
  std::this_thread::sleep_for(*duration);
  delete duration;
}

}  // namespace

absl::Status StallStream(int device, void* stream, std::chrono::milliseconds duration) {
  ScopedDevice scoped(device);
  if (!scoped.status().ok()) return scoped.status();
  auto* argument = new std::chrono::milliseconds(duration);
  const cudaError_t error = cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), &SleepOnHost, argument);
  if (error != cudaSuccess) {
    cudaGetLastError();
    delete argument;
  }
  return CudaStatus(error, "cudaLaunchHostFunc", device);
}

}  // namespace herd
