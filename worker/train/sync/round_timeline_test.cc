#include "worker/train/sync/round_timeline.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace herd {
namespace {

using Time = WorkTimes::Time;

Time At(double seconds) {
  return Time(std::chrono::duration_cast<Time::duration>(std::chrono::duration<double>(1000 + seconds)));
}

WorkTimes Op(double queued, double started, double first_hop, double finished) {
  WorkTimes t;
  t.queued = At(queued);
  t.started = At(started);
  t.first_hop = At(first_hop);
  t.finished = At(finished);
  return t;
}

TEST(RoundTimelineTest, PhasesOfAnOverlappedInt8Round) {
  RoundEvents e;
  e.launch_start = At(0);
  e.launch_end = At(0.01);
  e.has_scales = true;
  e.scales = Op(0.01, 0.05, 0.05, 0.25);  // waited 40 ms behind an earlier op, 200 ms on the wire
  // Two buckets issued at 0.30 (Advance), the first starting at 0.32.
  e.data = {Op(0.30, 0.32, 0.50, 0.60), Op(0.30, 0.60, 0.75, 0.90)};
  e.blocked_seconds = 0.05;
  e.merge_start = At(1.0);
  e.merge_end = At(1.004);
  const RoundTimeline t = BuildRoundTimeline(e);
  EXPECT_NEAR(t.launch_seconds, 0.01, 1e-9);
  EXPECT_NEAR(t.scales_seconds, 0.20, 1e-9);
  EXPECT_NEAR(t.queued_seconds, 0.02, 1e-9);
  EXPECT_NEAR(t.reduce_scatter_seconds, 0.75 - 0.32, 1e-9);  // to the last bucket's first hop
  EXPECT_NEAR(t.all_gather_seconds, 0.15, 1e-9);
  EXPECT_NEAR(t.merge_seconds, 0.004, 1e-9);
  EXPECT_NEAR(t.in_flight_seconds, 0.90, 1e-9);
  EXPECT_NEAR(t.blocked_seconds, 0.05, 1e-12);
}

TEST(RoundTimelineTest, APlainRoundAndABackendWithoutHopTimes) {
  RoundEvents e;
  e.launch_start = At(0);
  e.launch_end = At(0.002);
  WorkTimes op = Op(0.001, 0.001, 0, 0.3);
  op.first_hop = Time();  // unknown: all of it counts as the first hop
  op.window_bytes = 14480;
  op.rtt_seconds = 0.2;
  e.data = {op};
  const RoundTimeline t = BuildRoundTimeline(e);
  EXPECT_NEAR(t.queued_seconds, 0, 1e-9);
  EXPECT_NEAR(t.reduce_scatter_seconds, 0.299, 1e-9);
  EXPECT_EQ(t.all_gather_seconds, 0);
  EXPECT_EQ(t.merge_seconds, 0);  // not merged (yet)
  EXPECT_NEAR(t.in_flight_seconds, 0.3, 1e-9);
  EXPECT_EQ(t.window_bytes, 14480);
  EXPECT_EQ(t.rtt_seconds, 0.2);
}

TEST(RoundTimelineTest, TotalsDescribeMeansPerRound) {
  RoundTotals totals;
  EXPECT_EQ(totals.Describe(), "no rounds");
  RoundTimeline a;
  a.reduce_scatter_seconds = 0.3;
  a.in_flight_seconds = 0.5;
  a.blocked_seconds = 0.1;
  RoundTimeline b = a;
  b.reduce_scatter_seconds = 0.1;
  b.blocked_seconds = 0;
  b.window_bytes = 65536;
  b.rtt_seconds = 0.2;
  totals.Add(a);
  totals.Add(b);
  const std::string text = totals.Describe();
  EXPECT_TRUE(absl::StrContains(text, "reduce-scatter 0.2000 s")) << text;
  EXPECT_TRUE(absl::StrContains(text, "in flight 0.5000 s, blocked 0.0500 s")) << text;
  EXPECT_TRUE(absl::StrContains(text, "last TCP window 64 KiB, rtt 200.0 ms")) << text;
}

}  // namespace
}  // namespace herd
