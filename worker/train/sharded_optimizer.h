// Sharded optimizer state, ZeRO stage 1 (sync.shard_optimizer, mode
// allreduce). Whole parameter tensors are assigned to ranks, bytes balanced
// (AssignShardOwners); each rank keeps the optimizer state of the tensors it
// owns only and steps only those, then the updated parameters are
// all-gathered so every replica stays bitwise identical to the others and
// to a plain all-reduce run (Adam, AdamW and SGD-momentum update each
// element on its own, so who computes it does not change the result).
//
// Gradients are still summed by the bucketed all-reduce overlapped with
// backward (gradient_sync.h): the reduce-scatter is emulated, every rank
// holds the whole summed gradient and uses its shard's part. Clipping
// therefore sees the global norm with no extra collective.
//
// Commits and checkpoints hold the whole state: GatherState gives every rank
// the owners' state (an all-gather of step counts, then every owner's state
// tensors packed into one block per rank: one padded all-gather, or one
// broadcast per rank where the shards differ widely in size) right before a
// commit is
// captured, so a lost rank's shard survives in every other rank's commit, and
// healing, checkpoints and a re-form at another world size need no format of
// their own. DropForeignState then returns each rank to its own shard.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd {

// Owner rank of each tensor: largest first (registration order on ties) to
// the rank holding the fewest bytes so far (lowest rank on ties).
std::vector<int> AssignShardOwners(const std::vector<int64_t>& tensor_bytes, int world);

// Bytes of optimizer state held (every state tensor of every parameter).
int64_t OptimizerStateBytes(torch::optim::Optimizer& optimizer);

class OptimizerShards {
 public:
  // INVALID_ARGUMENT when the parameters do not share one dtype and device
  // (the parameter all-gather packs them into one buffer).
  static absl::StatusOr<std::unique_ptr<OptimizerShards>> Create(std::vector<torch::Tensor> params,
                                                                 Communicator* comm);

  bool Owns(size_t param) const { return owners_[param] == comm_->rank(); }
  int64_t owned_bytes() const { return owned_bytes_; }
  int64_t total_bytes() const { return total_bytes_; }
  std::string Describe() const;

  // Before the optimizer step: the state and gradients of tensors this rank
  // does not own are dropped, so the optimizer neither steps them nor keeps
  // state for them.
  void DropForeignState(torch::optim::Optimizer& optimizer) const;
  void DropForeignGradients() const;
  // Collective, after the step: every rank receives the owners' updated
  // parameters (one all-gather, each rank's shard padded to the largest).
  absl::Status ShareParameters();
  // Collective: every rank receives the whole optimizer state from the
  // owners (on failure, foreign parameters get none). UNIMPLEMENTED for an
  // optimizer other than sgd, adam and adamw.
  absl::Status GatherState(torch::optim::Optimizer& optimizer) const;

 private:
  OptimizerShards(std::vector<torch::Tensor> params, Communicator* comm, std::vector<int> owners);

  std::vector<torch::Tensor> params_;
  Communicator* comm_;
  std::vector<int> owners_;
  int64_t shard_elements_ = 0;  // the largest shard's elements: the all-gather's block
  int64_t owned_bytes_ = 0;
  int64_t total_bytes_ = 0;
  torch::Tensor send_;     // this rank's shard, packed
  torch::Tensor gathered_;  // every rank's block, rank order
};

}  // namespace herd
