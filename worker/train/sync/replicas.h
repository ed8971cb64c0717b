// Keeping replicas identical: the initial broadcast, the cheap hash compared
// at commit points, and the full bitwise comparison at the end of training.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"

namespace herd {

// Copies `root`'s parameter values into every rank's parameters.
absl::Status BroadcastParameters(Communicator* comm, const std::vector<torch::Tensor>& params, int root);

// Copies `root`'s values of tensors of any dtype (a model's buffers:
// running statistics, batch counters) into every rank's, byte for byte.
absl::Status BroadcastBuffers(Communicator* comm, const std::vector<torch::Tensor>& buffers, int root);

// FNV-1a over the raw bytes of every parameter, in order.
uint64_t ParameterHash(const std::vector<torch::Tensor>& params);

// INTERNAL naming the diverged ranks if the hashes (gathered by the caller,
// by rank: the commit point's all-gather carries more than the hash) differ.
absl::Status CheckReplicaHashes(const std::vector<uint64_t>& hashes, int64_t step);

// All-gathers every rank's full parameters and compares them bitwise with
// rank 0's: the definitive check, run once at the end of training.
absl::Status VerifyReplicasBitwise(Communicator* comm, const std::vector<torch::Tensor>& params);

// All parameters flattened into one contiguous float32 CPU tensor.
torch::Tensor FlattenParameters(const std::vector<torch::Tensor>& params);

}  // namespace herd
