// How a step's samples are split among the ranks (sync.shares, issue 31).
// "equal": as evenly as possible, fixed for the generation, so a run is
// bitwise reproducible. "throughput": each rank's share follows its measured
// rate, so a slow worker trains fewer samples per step instead of holding the
// others back. Both keep the step's size: the global batch, the sampler's
// positions and every sample's once-per-epoch use do not change, and the
// gradient stays the global-batch mean because each rank's loss is weighted
// by its share of the step (trainer.cc). Pure functions of what every rank
// all-gathered at a commit point, so every rank computes the same shares.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "worker/train/straggler.h"

namespace herd {

// `total` samples over `world` ranks: total / world each, the first
// total % world ranks one more. Empty for world <= 0.
std::vector<int64_t> EqualShares(int64_t total, int world);

// A re-plan is taken only when it cuts the predicted compute time of a step
// by at least this fraction: measurement noise must not make shares flap.
inline constexpr double kMinShareReplanGain = 0.1;

// New shares proportional to each rank's measured rate (its share times its
// steps over its compute seconds, RankStepTimes), with the same sum, at
// least 1 sample per rank, rounded by largest remainder (lower rank first on
// ties). nullopt (keep `current`) when a rank has no valid measurement, the
// sum is below the number of ranks, or the predicted step time (the largest
// share / rate) does not improve by min_gain.
std::optional<std::vector<int64_t>> PlanThroughputShares(const std::vector<int64_t>& current,
                                                         const std::vector<RankStepTimes>& times,
                                                         double min_gain = kMinShareReplanGain);

}  // namespace herd
