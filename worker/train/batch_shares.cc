#include "worker/train/batch_shares.h"

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

namespace {

// The compute seconds a step would take: the slowest rank's share / rate.
double PredictedStepSeconds(const std::vector<int64_t>& shares, const std::vector<double>& rates) {
  double worst = 0;
  for (size_t r = 0; r < shares.size(); ++r) worst = std::max(worst, static_cast<double>(shares[r]) / rates[r]);
  return worst;
}

}  // namespace

std::optional<std::vector<int64_t>> PlanThroughputShares(const std::vector<int64_t>& current,
                                                         const std::vector<RankStepTimes>& times, double min_gain) {
  const size_t world = current.size();
  if (world < 2 || times.size() != world) return std::nullopt;
  const int64_t total = std::accumulate(current.begin(), current.end(), int64_t{0});
  if (total < static_cast<int64_t>(world)) return std::nullopt;
  std::vector<double> rates(world);
  double rate_sum = 0;
  for (size_t r = 0; r < world; ++r) {
    const RankStepTimes& t = times[r];
    if (current[r] <= 0 || t.steps <= 0 || !(t.compute_seconds > 0) || !std::isfinite(t.compute_seconds)) {
      return std::nullopt;
    }
    rates[r] = static_cast<double>(current[r]) * static_cast<double>(t.steps) / t.compute_seconds;
    rate_sum += rates[r];
  }
  // Every rank keeps one sample; the rest is split by rate, floors first,
  // then the largest remainders.
  const int64_t spare = total - static_cast<int64_t>(world);
  std::vector<int64_t> proposed(world, 1);
  std::vector<double> remainder(world);
  int64_t given = 0;
  for (size_t r = 0; r < world; ++r) {
    const double ideal = static_cast<double>(spare) * rates[r] / rate_sum;
    const int64_t whole = std::min<int64_t>(spare - given, static_cast<int64_t>(std::floor(ideal)));
    proposed[r] += whole;
    given += whole;
    remainder[r] = ideal - static_cast<double>(whole);
  }
  std::vector<size_t> order(world);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t i = 0; given < spare; i = (i + 1) % world, ++given) ++proposed[order[i]];
  if (proposed == current) return std::nullopt;
  if (PredictedStepSeconds(proposed, rates) > (1 - min_gain) * PredictedStepSeconds(current, rates)) {
    return std::nullopt;
  }
  return proposed;
}

}  // namespace herd
