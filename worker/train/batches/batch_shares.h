// How a step's samples are split among the ranks (sync.shares).
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

#include "worker/train/report/straggler.h"

namespace herd {

// `total` samples over `world` ranks: total / world each, the first
// total % world ranks one more. Empty for world <= 0.
std::vector<int64_t> EqualShares(int64_t total, int world);

// With islands (sync.islands_by) and global_batch_size: `total` samples
// split equally among the islands (EqualShares over the islands, lower
// island first), then each island's part equally among its ranks, in rank
// order. `island_of[r]` is rank r's island, 0..I-1. Every island is one
// replica of the cross-site average, which weighs the islands equally: so
// each island trains the same batch per step, and an island that lost a
// member keeps its batch (its ranks take more each) as the whole step
// keeps the global batch. Empty when `island_of` is empty or names a
// negative island.
std::vector<int64_t> IslandShares(int64_t total, const std::vector<int>& island_of);

// How a re-plan is found, and why this way (measured in bench/README.md,
// "One slow worker"):
// - From one log interval, each rank's rate at its share is share / compute
//   seconds per step; the proportional target gives each rank the fraction
//   rate / sum of rates of the step. A step's fixed cost (the optimizer, the
//   sync's copies) makes that an under-correction, but repeating it is a
//   fixed-point iteration whose only fixed point is equal compute times: each
//   re-plan leaves (fixed part / step time) of the previous imbalance.
// - Only ratios within one interval are used, so a change of speed that hits
//   all ranks alike (the machine's other load, clock changes) moves nothing.
//   An earlier planner fitted a fixed cost per rank from two intervals; such
//   changes between intervals made those fits, and the shares, swing.
// - The targets are smoothed over intervals (kShareTargetSmoothing): one
//   interval's noise moves the shares only part of the way.
// - A re-plan is taken when it cuts the step time predicted from the
//   smoothed targets by at least min_gain, so shares settle instead of
//   following every sample of noise.
// - That threshold alone kept a smaller error for good: a first plan 2-3%
//   off, or the fixed cost's under-correction, never reached it, and the
//   fast ranks waited that long every step (bench/README.md, "One slow
//   worker"). Noise and such an error differ in one way:
//   noise moves the bounding rank (the one with the longest compute per
//   step) from interval to interval, an error keeps it. So when the same
//   rank bounded kPersistentIntervals intervals in a row, each of which
//   alone would have gained kMinPersistentReplanGain by re-planning, the
//   shares are re-planned to the latest interval's own targets, and the
//   smoothing restarts there. Three intervals and 1.5%, not two and 1%: with
//   three equally fast ranks whose compute per step varies by 1.5% between
//   intervals (as on the 2-core machine's throttled bench), two in a row
//   re-planned on noise about once in five intervals and three about once
//   in a hundred, while a persistent 2-3% error is still corrected
//   (batch_shares_test.cc, "NoisyIntervals" tests).
inline constexpr double kShareTargetSmoothing = 0.5;  // weight of the newest interval
inline constexpr double kMinShareReplanGain = 0.03;
inline constexpr double kMinPersistentReplanGain = 0.015;
inline constexpr int kPersistentIntervals = 3;

// What one commit point's plan hands to the next.
struct ShareHistory {
  // The smoothed fraction of the step each rank should train, summing to 1.
  // Empty when no rank had anything to measure yet.
  std::vector<double> targets;
  // The rank that bounded the last interval's steps, when re-planning from
  // that interval alone would have gained kMinPersistentReplanGain; else -1.
  int bounding_rank = -1;
  // How many intervals in a row, up to the last, that rank did so.
  int bounding_intervals = 0;
};

struct SharePlan {
  ShareHistory history;  // pass it back at the next commit point
  // The new shares: same sum, at least 1 sample per rank, rounded by
  // largest remainder (lower rank first on ties). nullopt: keep `current`.
  std::optional<std::vector<int64_t>> shares;
};

// The plan at a commit point from each rank's `times` over the log interval
// at shares `current`, and the history the commit point before left (empty
// at a generation's first). Keeps the shares, and the history, when a rank
// has no valid measurement (no steps, or compute time not finite and
// positive), the sizes differ, there are fewer than 2 ranks or the sum is
// below the number of ranks.
SharePlan PlanThroughputShares(const std::vector<int64_t>& current, const std::vector<RankStepTimes>& times,
                               const ShareHistory& previous = {}, double min_gain = kMinShareReplanGain);

}  // namespace herd
