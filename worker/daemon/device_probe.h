// A daemon started with --device=cuda checks, before it registers, that its
// trainers can see the GPUs it offers: a worker that registers GPUs it does
// not have would take cuda jobs and fail every one of them. The trainer
// binary answers, since it is the one that links (CUDA) LibTorch.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/contract/trainer_args.h"

namespace herd::worker {

// Runs `trainer_binary --probe-devices` (kProbeDevicesFlag), which prints one
// line "cuda_devices N", and returns N.
absl::StatusOr<int> ProbeCudaDevices(const std::string& trainer_binary);

// Whether the daemon's --device/--gpus can run on `visible` CUDA devices;
// the error names the flag and what the trainer sees.
absl::Status CheckOfferedGpus(const std::string& device, const std::vector<int>& gpus, int visible,
                              const std::string& trainer_binary);

}  // namespace herd::worker
