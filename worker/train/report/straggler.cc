#include "worker/train/report/straggler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace herd {

std::optional<StragglerSummary> FindStraggler(const std::vector<RankStepTimes>& ranks) {
  if (ranks.size() < 2) return std::nullopt;
  std::vector<double> compute(ranks.size());
  std::vector<double> wait(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankStepTimes& t = ranks[r];
    if (t.steps <= 0) return std::nullopt;
    if (!std::isfinite(t.compute_seconds) || !std::isfinite(t.wait_seconds)) return std::nullopt;
    if (t.compute_seconds < 0 || t.wait_seconds < 0) return std::nullopt;
    compute[r] = t.compute_seconds / static_cast<double>(t.steps);
    wait[r] = t.wait_seconds / static_cast<double>(t.steps);
  }
  StragglerSummary summary;
  summary.rank = 0;
  for (size_t r = 1; r < ranks.size(); ++r) {
    if (compute[r] > compute[summary.rank]) summary.rank = static_cast<int64_t>(r);
  }
  summary.compute_seconds_per_step = compute[summary.rank];
  std::vector<double> sorted = compute;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  summary.median_compute_seconds_per_step = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  double others_wait = 0;
  double step = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    step += compute[r] + wait[r];
    if (static_cast<int64_t>(r) != summary.rank) others_wait += wait[r];
  }
  summary.others_wait_seconds_per_step = others_wait / static_cast<double>(n - 1);
  summary.step_seconds = step / static_cast<double>(n);
  if (!(summary.step_seconds > 0)) return std::nullopt;
  summary.holdback_fraction = std::clamp(summary.others_wait_seconds_per_step / summary.step_seconds, 0.0, 1.0);
  return summary;
}

std::string DescribeStepTimes(const std::vector<RankStepTimes>& ranks, const std::vector<int64_t>& shares) {
  std::string out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankStepTimes& t = ranks[r];
    absl::StrAppend(&out, r == 0 ? "" : ", ", "rank ", r, " ");
    if (t.steps <= 0) {
      absl::StrAppend(&out, "-");
    } else {
      const double steps = static_cast<double>(t.steps);
      absl::StrAppend(&out, absl::StrFormat("%.3f/%.3f s", t.compute_seconds / steps, t.wait_seconds / steps));
    }
    if (r < shares.size()) absl::StrAppend(&out, " (", shares[r], ")");
  }
  return out;
}

}  // namespace herd
