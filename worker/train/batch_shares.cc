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

std::vector<std::optional<ShareMeasurement>> MeasureShares(const std::vector<int64_t>& shares,
                                                           const std::vector<RankStepTimes>& times) {
  std::vector<std::optional<ShareMeasurement>> measured(times.size());
  for (size_t r = 0; r < times.size() && r < shares.size(); ++r) {
    const RankStepTimes& t = times[r];
    if (shares[r] <= 0 || t.steps <= 0 || !(t.compute_seconds > 0) || !std::isfinite(t.compute_seconds)) continue;
    measured[r] = ShareMeasurement{shares[r], t.compute_seconds / static_cast<double>(t.steps)};
  }
  return measured;
}

StepTimeModel FitStepTime(const ShareMeasurement& latest, const std::optional<ShareMeasurement>& earlier) {
  const double s2 = static_cast<double>(latest.share);
  const double t2 = latest.compute_seconds_per_step;
  const StepTimeModel proportional{0.0, t2 / s2};
  if (!earlier.has_value() || earlier->share <= 0 || !(earlier->compute_seconds_per_step > 0) ||
      !std::isfinite(earlier->compute_seconds_per_step)) {
    return proportional;
  }
  const double s1 = static_cast<double>(earlier->share);
  if (std::abs(s2 - s1) < kMinFitShareSpread * std::max(s1, s2)) return proportional;
  const double slope = (t2 - earlier->compute_seconds_per_step) / (s2 - s1);
  const double fixed = t2 - slope * s2;
  if (!(slope > 0) || fixed < 0) return proportional;
  return {fixed, slope};
}

namespace {

// The compute seconds a step would take: the slowest rank's.
double PredictedStepSeconds(const std::vector<int64_t>& shares, const std::vector<StepTimeModel>& models) {
  double worst = 0;
  for (size_t r = 0; r < shares.size(); ++r) worst = std::max(worst, models[r].At(static_cast<double>(shares[r])));
  return worst;
}

// Real-valued shares, each at least 1, summing to `total`, that give every
// rank above the minimum the same predicted time: the time is found by
// bisection (the summed shares grow with it).
std::vector<double> IdealShares(int64_t total, const std::vector<StepTimeModel>& models) {
  auto shares_at = [&](double seconds, double* sum) {
    std::vector<double> shares(models.size());
    *sum = 0;
    for (size_t r = 0; r < models.size(); ++r) {
      shares[r] = std::max(1.0, (seconds - models[r].fixed_seconds) / models[r].per_sample_seconds);
      *sum += shares[r];
    }
    return shares;
  };
  double lo = 0;
  double hi = 0;
  for (const StepTimeModel& m : models) hi = std::max(hi, m.At(static_cast<double>(total)));
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    double sum = 0;
    shares_at(mid, &sum);
    (sum < static_cast<double>(total) ? lo : hi) = mid;
  }
  double sum = 0;
  return shares_at(hi, &sum);
}

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
  // Floors above the total (only from the bisection's last bit): take back
  // from the smallest remainders first, never below 1.
  for (size_t i = world; given > total && i-- > 0;) {
    if (shares[order[i]] > 1) {
      --shares[order[i]];
      --given;
    }
  }
  return shares;
}

}  // namespace

std::optional<std::vector<int64_t>> PlanThroughputShares(const std::vector<int64_t>& current,
                                                         const std::vector<RankStepTimes>& times,
                                                         const std::vector<std::optional<ShareMeasurement>>& earlier,
                                                         double min_gain) {
  const size_t world = current.size();
  if (world < 2 || times.size() != world) return std::nullopt;
  const int64_t total = std::accumulate(current.begin(), current.end(), int64_t{0});
  if (total < static_cast<int64_t>(world)) return std::nullopt;
  const std::vector<std::optional<ShareMeasurement>> latest = MeasureShares(current, times);
  std::vector<StepTimeModel> models(world);
  for (size_t r = 0; r < world; ++r) {
    if (!latest[r].has_value()) return std::nullopt;
    models[r] = FitStepTime(*latest[r], r < earlier.size() ? earlier[r] : std::nullopt);
  }
  std::vector<int64_t> proposed = RoundShares(total, IdealShares(total, models));
  if (proposed == current) return std::nullopt;
  if (PredictedStepSeconds(proposed, models) > (1 - min_gain) * PredictedStepSeconds(current, models)) {
    return std::nullopt;
  }
  return proposed;
}

}  // namespace herd
