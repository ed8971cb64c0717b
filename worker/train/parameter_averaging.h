// Parameter averaging for sync mode `average` (local SGD, and DiLoCo-style
// outer optimization).
//
// Ranks train locally between rounds; a round makes every replica identical
// again. Each rank keeps the parameters of the last round (the "anchor",
// identical everywhere) and all-reduces its pseudo-gradient anchor - params,
// flattened into buckets sized like the gradient buckets. The mean
// pseudo-gradient g then drives an outer step on the anchor:
//   outer none:     anchor -= g                     (anchor = plain average)
//   outer nesterov: m = mu*m + g; anchor -= lr * (g + mu*m)
// and the new anchor becomes every replica's parameters. The inner
// optimizer's state stays local.
//
// Sending the difference from the shared anchor rather than raw parameters is
// what makes fp16/bf16 wire compression usable: the rounding error scales
// with the size of the local update, not with the parameters' magnitude.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/train/sync_config.h"

namespace herd {

// The outer update on flat float tensors, in place: the math of a round once
// the mean pseudo-gradient is known. `momentum` is used for nesterov only.
void OuterStep(const OuterStepConfig& config, const torch::Tensor& pseudo_grad, torch::Tensor& anchor,
               torch::Tensor& momentum);

struct ParameterAveragingOptions {
  double first_bucket_mib = 1;
  double bucket_cap_mib = 25;
  DataType wire_type = DataType::kFloat32;  // sync.compression
  OuterStepConfig outer;
};

// What the last round did.
struct AveragingRoundStats {
  int64_t rounds = 0;             // rounds so far, this one included
  int64_t wire_bytes = 0;         // bytes all-reduced by this rank in this round
  double seconds = 0;             // this round, start to end
  double interval_seconds = 0;    // since the previous round ended (or the anchor was set)
};

class ParameterAveraging {
 public:
  // INVALID_ARGUMENT for bucket sizes <= 0 or a parameter that is not float32. Takes the current parameters as anchor.
  static absl::StatusOr<std::unique_ptr<ParameterAveraging>> Create(std::vector<torch::Tensor> params,
                                                                   Communicator* comm,
                                                                   ParameterAveragingOptions options);
  ~ParameterAveraging();
  ParameterAveraging(const ParameterAveraging&) = delete;
  ParameterAveraging& operator=(const ParameterAveraging&) = delete;

  // Takes the current parameters as the anchor. Only valid when every
  // replica holds the same values (after a broadcast or an all-reduce step).
  void ResetAnchor();

  // Collective: every rank calls it at the same step. On success all
  // replicas hold bitwise-identical parameters; on failure the parameters
  // are left as they were.
  absl::Status Round();

  const AveragingRoundStats& last_round() const { return stats_; }

  // The outer optimizer's state (nesterov momentum, one flat tensor per
  // bucket; empty for outer none), for checkpoints: the rest of the state is
  // the parameters themselves, which equal the anchor at every round.
  std::vector<torch::Tensor> OuterState() const;
  // INVALID_ARGUMENT when `state` does not match this instance's buckets.
  absl::Status RestoreOuterState(const std::vector<torch::Tensor>& state);
  std::vector<int64_t> bucket_elements() const;

 private:
  struct Bucket {
    std::vector<int> params;
    std::vector<int64_t> offsets;
    torch::Tensor anchor;    // float32, parameters at the last round
    torch::Tensor momentum;  // float32, outer momentum (nesterov)
    torch::Tensor delta;     // float32, pseudo-gradient being reduced
    torch::Tensor wire;      // compressed copy sent on the wire, if compressing
  };

  ParameterAveraging(std::vector<torch::Tensor> params, Communicator* comm, ParameterAveragingOptions options);

  std::vector<torch::Tensor> params_;
  Communicator* comm_;
  ParameterAveragingOptions options_;
  OuterStepConfig outer_;
  DataType wire_type_;
  std::vector<Bucket> buckets_;
  AveragingRoundStats stats_;
  std::chrono::steady_clock::time_point last_round_end_;
};

}  // namespace herd
