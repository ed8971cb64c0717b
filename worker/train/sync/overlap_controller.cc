#include "worker/train/sync/overlap_controller.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace herd {

OverlapDecision ChooseOverlap(int64_t current, const OverlapMeasurement& m, const OverlapBounds& bounds) {
  const int64_t lo = std::max<int64_t>(1, bounds.min_steps);
  const int64_t hi = std::max(lo, bounds.max_steps);
  OverlapDecision d;
  current = std::clamp(current, lo, hi);
  d.steps = current;
  d.needed_steps = current;
  if (!(m.step_seconds > 0) || !(m.round_seconds >= 0)) return d;  // nothing measured yet
  const double need = m.round_seconds * (1 + bounds.margin) / m.step_seconds;
  d.needed_steps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(need)));
  d.exposed = m.blocked_seconds > bounds.exposed_share * m.step_seconds;
  d.beyond_bound = d.needed_steps > hi;
  if (d.needed_steps > current) {
    d.steps = std::min(hi, d.needed_steps);
  } else if (d.exposed && d.needed_steps == current) {
    // Borderline: the measure says tau just hides it, yet the loop waited.
    d.steps = std::min(hi, current + 1);
  } else if (d.needed_steps < current) {
    // A quarter of the way down (at least a step): a link that got faster
    // is followed within a few rounds, a noisy one does not swing tau.
    d.steps = std::max(lo, current - std::max<int64_t>(1, (current - d.needed_steps) / 4));
  }
  return d;
}

std::string OverlapWarning(const OverlapDecision& d, const OverlapMeasurement& m, const OverlapBounds& bounds) {
  if (!d.beyond_bound) return "";
  return absl::StrFormat(
      "the link needs %d steps per round; sync.every is %d (a round takes %.2f s, a step %.3f s): rounds wait "
      "on the network; raise sync.every or sync.fragments, or compress (sync.compression: int8)",
      d.needed_steps, bounds.max_steps, m.round_seconds, m.step_seconds);
}

}  // namespace herd
