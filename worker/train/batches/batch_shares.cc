#include "worker/train/batches/batch_shares.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace herd {

std::vector<int64_t> EqualShares(int64_t total, int world) {
  if (world <= 0) return {};
  std::vector<int64_t> shares(static_cast<size_t>(world), total / world);
  for (int64_t r = 0; r < total % world; ++r) ++shares[static_cast<size_t>(r)];
  return shares;
}

std::vector<int64_t> IslandShares(int64_t total, const std::vector<int>& island_of) {
  if (island_of.empty() || *std::min_element(island_of.begin(), island_of.end()) < 0) return {};
  const int islands = *std::max_element(island_of.begin(), island_of.end()) + 1;
  std::vector<std::vector<size_t>> ranks(static_cast<size_t>(islands));
  for (size_t r = 0; r < island_of.size(); ++r) ranks[static_cast<size_t>(island_of[r])].push_back(r);
  const std::vector<int64_t> per_island = EqualShares(total, islands);
  std::vector<int64_t> shares(island_of.size(), 0);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::vector<int64_t> inside = EqualShares(per_island[i], static_cast<int>(ranks[i].size()));
    for (size_t k = 0; k < inside.size(); ++k) shares[ranks[i][k]] = inside[k];
  }
  return shares;
}

namespace {

// Whole shares from ideal ones: floors (at least 1), then one more to the
// largest remainders (lower rank first on ties) until they sum to `total`.
std::vector<int64_t> RoundShares(int64_t total, const std::vector<double>& ideal) {
  const size_t world = ideal.size();
  std::vector<int64_t> shares(world);
  std::vector<double> remainder(world);
  int64_t given = 0;
  for (size_t r = 0; r < world; ++r) {
    shares[r] = std::max<int64_t>(1, static_cast<int64_t>(std::floor(ideal[r])));
    remainder[r] = ideal[r] - static_cast<double>(shares[r]);
    given += shares[r];
  }
  std::vector<size_t> order(world);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t i = 0; given < total; i = (i + 1) % world, ++given) ++shares[order[i]];
  // Floors of 1 above the total (tiny shares): take back from the smallest
  // remainders first, never below 1.
  for (size_t i = world; given > total && i-- > 0;) {
    if (shares[order[i]] > 1) {
      --shares[order[i]];
      --given;
    }
  }
  return shares;
}

// The rank whose share over its target fraction is the largest (the lowest
// on ties): the one that sets the step's time under ranks as fast as
// `targets` say; under one interval's own targets, the one with the longest
// compute per step.
size_t BoundingRank(const std::vector<int64_t>& shares, const std::vector<double>& targets) {
  size_t bounding = 0;
  for (size_t r = 1; r < shares.size(); ++r) {
    if (static_cast<double>(shares[r]) / targets[r] > static_cast<double>(shares[bounding]) / targets[bounding]) {
      bounding = r;
    }
  }
  return bounding;
}

// A step's time relative to the others' under ranks as fast as `targets`
// say: the bounding rank's share over its target fraction.
double RelativeStepTime(const std::vector<int64_t>& shares, const std::vector<double>& targets) {
  const size_t bounding = BoundingRank(shares, targets);
  return static_cast<double>(shares[bounding]) / targets[bounding];
}

// Whether `proposed` cuts the step time under `targets` by at least `gain`.
bool Gains(const std::vector<int64_t>& current, const std::vector<int64_t>& proposed,
           const std::vector<double>& targets, double gain) {
  return proposed != current && RelativeStepTime(proposed, targets) <= (1 - gain) * RelativeStepTime(current, targets);
}

std::vector<int64_t> SharesFor(int64_t total, const std::vector<double>& targets) {
  std::vector<double> ideal(targets.size());
  for (size_t r = 0; r < targets.size(); ++r) ideal[r] = targets[r] * static_cast<double>(total);
  return RoundShares(total, ideal);
}

}  // namespace

SharePlan PlanThroughputShares(const std::vector<int64_t>& current, const std::vector<RankStepTimes>& times,
                               const ShareHistory& previous, double min_gain) {
  SharePlan plan{previous, std::nullopt};
  const size_t world = current.size();
  if (world < 2 || times.size() != world) return plan;
  const int64_t total = std::accumulate(current.begin(), current.end(), int64_t{0});
  if (total < static_cast<int64_t>(world)) return plan;
  std::vector<double> rates(world);
  double rate_sum = 0;
  for (size_t r = 0; r < world; ++r) {
    const RankStepTimes& t = times[r];
    if (current[r] <= 0 || t.steps <= 0 || !(t.compute_seconds > 0) || !std::isfinite(t.compute_seconds)) {
      return plan;
    }
    rates[r] = static_cast<double>(current[r]) * static_cast<double>(t.steps) / t.compute_seconds;
    rate_sum += rates[r];
  }
  std::vector<double> latest(world);
  for (size_t r = 0; r < world; ++r) latest[r] = rates[r] / rate_sum;
  const bool smooth = previous.targets.size() == world;
  std::vector<double> targets(world);
  for (size_t r = 0; r < world; ++r) {
    targets[r] = smooth ? kShareTargetSmoothing * latest[r] + (1 - kShareTargetSmoothing) * previous.targets[r]
                        : latest[r];
  }
  plan.history.targets = targets;

  // What this interval alone calls for, and whether it repeats the last one.
  const std::vector<int64_t> from_latest = SharesFor(total, latest);
  const bool worth_it = Gains(current, from_latest, latest, kMinPersistentReplanGain);
  plan.history.bounding_rank = worth_it ? static_cast<int>(BoundingRank(current, latest)) : -1;
  int& in_a_row = plan.history.bounding_intervals;
  if (!worth_it) {
    in_a_row = 0;
  } else if (plan.history.bounding_rank == previous.bounding_rank) {
    in_a_row = std::min(previous.bounding_intervals + 1, kPersistentIntervals);
  } else {
    in_a_row = 1;
  }
  if (in_a_row >= kPersistentIntervals) {
    plan.history.targets = latest;
    plan.shares = from_latest;
    return plan;
  }

  std::vector<int64_t> proposed = SharesFor(total, targets);
  if (Gains(current, proposed, targets, min_gain)) plan.shares = std::move(proposed);
  return plan;
}

}  // namespace herd
