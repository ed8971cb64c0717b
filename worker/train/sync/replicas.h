// Keeping replicas identical: the initial broadcast, the hash compared at
// commit points, and the per-tensor comparison at the end of training.
//
// Comparisons go by 64-bit hashes of the raw bytes, never by the values
// themselves: gathering every rank's parameters costs (world - 1) x the
// model on every rank's link, which across sites is a whole round's worth
// of slow-link bytes per rank for one check. The hash folds each 8-byte
// word through a bijective mixer, so any single changed word always
// changes it and several changed words go unnoticed with probability about
// 2^-64.
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

// One hash over the raw bytes of every parameter, in order.
uint64_t ParameterHash(const std::vector<torch::Tensor>& params);

// One hash per tensor, of its raw bytes.
std::vector<uint64_t> TensorHashes(const std::vector<torch::Tensor>& params);

// INTERNAL naming the diverged ranks if the hashes (gathered by the caller,
// by rank: the commit point's all-gather carries more than the hash) differ.
absl::Status CheckReplicaHashes(const std::vector<uint64_t>& hashes, int64_t step);

// All-gathers every rank's TensorHashes (8 bytes a tensor) and compares
// them with rank 0's: INTERNAL naming the first rank and tensor that
// differ. Run once at the end of training.
absl::Status VerifyReplicasBitwise(Communicator* comm, const std::vector<torch::Tensor>& params);

// All parameters flattened into one contiguous float32 CPU tensor.
torch::Tensor FlattenParameters(const std::vector<torch::Tensor>& params);

}  // namespace herd
