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
// 5% flapped on a loaded 2-core machine (bench/README.md, issue 31): two
// identical workers' shares swung by 15% at every commit point.
inline constexpr double kMinShareReplanGain = 0.1;

// One rank's compute seconds per step at one share, over a log interval.
struct ShareMeasurement {
  int64_t share = 0;
  double compute_seconds_per_step = 0;
};

// Each rank's measurement at its share `shares[r]` over an interval: nullopt
// for a rank without a valid one (no share, no steps, no finite positive
// compute time) or beyond either vector.
std::vector<std::optional<ShareMeasurement>> MeasureShares(const std::vector<int64_t>& shares,
                                                           const std::vector<RankStepTimes>& times);

// A rank's compute seconds per step as a function of its share:
// fixed_seconds + per_sample_seconds * share. The fixed part is what a step
// costs whatever its size (the optimizer's update, the sync's own work, the
// step's bookkeeping): shares proportional to rates, which ignore it, leave
// the rank with the largest fixed part (the slow one) the slowest.
struct StepTimeModel {
  double fixed_seconds = 0;
  double per_sample_seconds = 0;
  double At(double share) const { return fixed_seconds + per_sample_seconds * share; }
};

// Two measurements whose shares differ by at least this fraction of the
// larger fit both parameters; closer ones are mostly noise.
inline constexpr double kMinFitShareSpread = 0.1;

// The line through `earlier` and `latest` when their shares are far enough
// apart and it has a positive slope and no negative fixed part; else time
// proportional to the share through `latest` (fixed_seconds 0). `latest`
// must have a positive share and time.
StepTimeModel FitStepTime(const ShareMeasurement& latest, const std::optional<ShareMeasurement>& earlier);

// New shares that give every rank the same predicted compute time per step
// under its StepTimeModel (fitted from this log interval's `times`, measured
// at `current`, and, where given, `earlier`: each rank's measurement of the
// interval before, at the shares it had then), with the same sum, at least 1
// sample per rank, rounded by largest remainder (lower rank first on ties).
// Without `earlier`, shares are proportional to the measured rates. Repeated
// at each commit point, the plan converges on equal compute times even when
// a step has a fixed cost. nullopt (keep `current`) when a rank has no valid
// measurement, the sum is below the number of ranks, or the predicted step
// time (the slowest rank's) does not improve by min_gain.
std::optional<std::vector<int64_t>> PlanThroughputShares(
    const std::vector<int64_t>& current, const std::vector<RankStepTimes>& times,
    const std::vector<std::optional<ShareMeasurement>>& earlier = {}, double min_gain = kMinShareReplanGain);

}  // namespace herd
