#include "worker/train/sync/round_timeline.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace herd {
namespace {

using Time = WorkTimes::Time;

bool Known(Time t) { return t.time_since_epoch().count() != 0; }

double Between(Time from, Time to) {
  if (!Known(from) || !Known(to) || to < from) return 0;
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

RoundTimeline BuildRoundTimeline(const RoundEvents& e) {
  RoundTimeline t;
  t.launch_seconds = Between(e.launch_start, e.launch_end);
  if (e.has_scales) t.scales_seconds = Between(e.scales.started, e.scales.finished);
  t.merge_seconds = Between(e.merge_start, e.merge_end);
  t.blocked_seconds = e.blocked_seconds;
  Time network_end = e.has_scales ? e.scales.finished : e.launch_end;
  if (!e.data.empty()) {
    const WorkTimes& first = e.data.front();
    const WorkTimes& last = e.data.back();
    // Ops run in issue order: the first data op waits for what was issued
    // before it; later ones queue behind earlier buckets of this round,
    // which is wire time of this round, not queueing.
    t.queued_seconds = Between(first.queued, first.started);
    if (e.has_scales) {
      // An overlapped int8 round issues its data after the scales came
      // back: only the wait behind other ops after that counts.
      t.queued_seconds = Between(std::max(first.queued, e.scales.finished), first.started);
    }
    const Time first_hop = Known(last.first_hop) ? last.first_hop : last.finished;
    t.reduce_scatter_seconds = Between(first.started, first_hop);
    t.all_gather_seconds = Between(first_hop, last.finished);
    t.window_bytes = first.window_bytes;
    t.rtt_seconds = first.rtt_seconds;
    network_end = last.finished;
  }
  t.in_flight_seconds = Between(e.launch_start, network_end);
  return t;
}

void RoundTotals::Add(const RoundTimeline& r) {
  ++rounds;
  sum.launch_seconds += r.launch_seconds;
  sum.scales_seconds += r.scales_seconds;
  sum.queued_seconds += r.queued_seconds;
  sum.reduce_scatter_seconds += r.reduce_scatter_seconds;
  sum.all_gather_seconds += r.all_gather_seconds;
  sum.merge_seconds += r.merge_seconds;
  sum.in_flight_seconds += r.in_flight_seconds;
  sum.blocked_seconds += r.blocked_seconds;
  sum.window_bytes = r.window_bytes;
  sum.rtt_seconds = r.rtt_seconds;
}

std::string RoundTotals::Describe() const {
  if (rounds == 0) return "no rounds";
  const double n = static_cast<double>(rounds);
  std::string text = absl::StrFormat(
      "per round: launch %.4f s, scales %.4f s, queued %.4f s, reduce-scatter %.4f s, all-gather %.4f s, "
      "merge %.4f s; in flight %.4f s, blocked %.4f s",
      sum.launch_seconds / n, sum.scales_seconds / n, sum.queued_seconds / n, sum.reduce_scatter_seconds / n,
      sum.all_gather_seconds / n, sum.merge_seconds / n, sum.in_flight_seconds / n, sum.blocked_seconds / n);
  if (sum.window_bytes > 0) {
    absl::StrAppendFormat(&text, "; last TCP window %d KiB, rtt %.1f ms", sum.window_bytes / 1024,
                          sum.rtt_seconds * 1000);
  }
  return text;
}

}  // namespace herd
