// What mode average's strategy (sync_strategy.cc) asks of its rounds: the
// plain ParameterAveraging over every rank, or with sync.islands_by the
// island rounds (island_sync.h), where each rank averages its shard across
// islands and its island shares the merged shards. The methods mean what
// ParameterAveraging's do (parameter_averaging.h).
#pragma once

#include <torch/types.h>

#include <vector>

#include "absl/status/status.h"
#include "worker/train/sync/round_shape.h"
#include "worker/train/sync/round_timeline.h"

namespace herd {

// What the last round did.
struct AveragingRoundStats {
  int64_t rounds = 0;             // rounds so far, this one included
  int64_t wire_bytes = 0;         // bytes this rank contributed to the round's collectives
  double seconds = 0;             // this round's time blocking the caller (launch and finish)
  double interval_seconds = 0;    // since the previous round ended (or the anchor was set)
  // Where each fragment round finished by the last Finish spent its time.
  std::vector<RoundTimeline> timelines;
  // Each finished round's side payload (see Launch), all-gathered: rank r's
  // values at [r * n, (r + 1) * n); empty for a round launched without one.
  // The same on every rank, in the order of `timelines`.
  std::vector<std::vector<float>> side_payloads;
};

class AveragingRounds {
 public:
  virtual ~AveragingRounds() = default;

  virtual void ResetAnchor() = 0;
  virtual absl::Status Round(const std::vector<double>& weights = {}) = 0;
  virtual absl::Status Launch(int fragment, bool keep_local_steps, double weight = 1, bool overlap_scales = false,
                              std::vector<float> side = {}) = 0;
  virtual absl::Status Advance(int count = -1) = 0;
  virtual absl::Status Finish(int count = -1) = 0;
  virtual bool in_flight() const = 0;
  virtual int fragments() const = 0;
  // The shape of the int8 rounds launched from now on (round_shape.h); every
  // rank must set the same one before the same launch. False where these
  // rounds have only all-reduce (the shape stays all-reduce).
  virtual bool SetRoundShape(RoundShape shape) { return shape == RoundShape::kAllReduce; }
  // How many replicas a round averages: the ranks, or with islands the
  // islands (InitialRoundShape's world).
  virtual int round_ranks() const = 0;
  virtual const AveragingRoundStats& last_round() const = 0;

  virtual std::vector<torch::Tensor> Residuals() const = 0;
  virtual absl::Status RestoreResiduals(const std::vector<torch::Tensor>& state) = 0;
  virtual std::vector<torch::Tensor> OuterState() const = 0;
  virtual absl::Status RestoreOuterState(const std::vector<torch::Tensor>& state) = 0;
  // Collective, before a commit reads OuterState: makes it whole where
  // ranks hold parts of it (islands). Nothing to do by default.
  virtual absl::Status GatherOuterState() { return absl::OkStatus(); }
};

}  // namespace herd
