// Small CUDA helpers with no CUDA types in their signatures, so callers (the
// NCCL checks, the smoke binary, the worker's device census) compile in every
// build. In a build without NCCL they return UNIMPLEMENTED.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace herd {

// Visible CUDA devices; FAILED_PRECONDITION with CUDA's reason when there is
// no usable driver or device.
absl::StatusOr<int> CudaDeviceCount();

// "NVIDIA H100 80GB HBM3 (sm_90)" or an error naming the device.
absl::StatusOr<std::string> CudaDeviceName(int device);

// A device allocation, freed on destruction. Copies are synchronous and
// ordered on the legacy default stream.
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Allocate(int device, size_t bytes);

  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

  absl::Status CopyFromHost(const void* source, size_t bytes);
  absl::Status CopyToHost(void* destination, size_t bytes) const;

 private:
  DeviceBuffer(int device, void* data, size_t bytes) : device_(device), data_(data), bytes_(bytes) {}

  int device_ = 0;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Holds `stream` (a cudaStream_t; nullptr = legacy default stream) on the
// host for `duration`, so work queued after this call starts late. Tests use
// it to play a slow or hung peer.
absl::Status StallStream(int device, void* stream, std::chrono::milliseconds duration);

}  // namespace herd
