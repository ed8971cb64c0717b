#include "worker/train/sync/overlap_controller.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace herd {
namespace {

OverlapBounds Bounds(int64_t max_steps) {
  OverlapBounds b;
  b.min_steps = 1;
  b.max_steps = max_steps;
  b.margin = 0.25;
  return b;
}

TEST(OverlapControllerTest, GrowsAtOnceToWhatAnExposedRoundNeeds) {
  // A round of 0.8 s at 0.08 s a step needs ceil(0.8 * 1.25 / 0.08) = 13 steps.
  const OverlapDecision d = ChooseOverlap(8, {0.8, 0.08, 0.2}, Bounds(32));
  EXPECT_TRUE(d.exposed);
  EXPECT_EQ(d.needed_steps, 13);
  EXPECT_EQ(d.steps, 13);
  EXPECT_FALSE(d.beyond_bound);
}

TEST(OverlapControllerTest, GrowsWhenNeededIsAboveEvenIfNothingBlockedYet) {
  const OverlapDecision d = ChooseOverlap(4, {0.8, 0.08, 0.0}, Bounds(32));
  EXPECT_FALSE(d.exposed);
  EXPECT_EQ(d.steps, 13);
}

TEST(OverlapControllerTest, AnExposedRoundAtTheBorderGrowsByOneStep) {
  // The measure says 8 would just do, but the caller still waited: one more.
  const OverlapDecision d = ChooseOverlap(8, {0.5, 0.08, 0.05}, Bounds(32));
  EXPECT_EQ(d.needed_steps, 8);
  EXPECT_EQ(d.steps, 9);
}

TEST(OverlapControllerTest, AWaitWhileTheRoundIsWellHiddenIsAPeerRunningLateNotTheLink) {
  // needs 5 steps; tau 12 hides it with room to spare; a 20 ms wait is a
  // peer that drifted behind: tau still shrinks.
  const OverlapDecision d = ChooseOverlap(12, {0.4, 0.1, 0.02}, Bounds(32));
  EXPECT_TRUE(d.exposed);
  EXPECT_EQ(d.steps, 11);
}

TEST(OverlapControllerTest, ShrinksAQuarterOfTheGapPerDecisionWhenHiddenWithMargin) {
  // needs ceil(0.4 * 1.25 / 0.1) = 5
  std::vector<int64_t> path;
  int64_t tau = 32;
  for (int i = 0; i < 12; ++i) path.push_back(tau = ChooseOverlap(tau, {0.4, 0.1, 0.0}, Bounds(32)).steps);
  // 32 - 27/4 = 26, 26 - 21/4 = 21, ... then one step at a time near it.
  EXPECT_EQ(path, (std::vector<int64_t>{26, 21, 17, 14, 12, 11, 10, 9, 8, 7, 6, 5}));
  EXPECT_EQ(ChooseOverlap(5, {0.4, 0.1, 0.0}, Bounds(32)).steps, 5);  // 4 would not cover the margin
}

TEST(OverlapControllerTest, KeepsWhatJustHides) {
  const OverlapDecision d = ChooseOverlap(5, {0.4, 0.1, 0.001}, Bounds(32));
  EXPECT_EQ(d.steps, 5);
}

TEST(OverlapControllerTest, StaysWithinBoundsAndSaysWhenTheBoundIsNotEnough) {
  const OverlapMeasurement slow{3.2, 0.08, 1.0};
  const OverlapDecision d = ChooseOverlap(30, slow, Bounds(32));
  EXPECT_EQ(d.steps, 32);
  EXPECT_EQ(d.needed_steps, 50);
  EXPECT_TRUE(d.beyond_bound);
  const std::string warning = OverlapWarning(d, slow, Bounds(32));
  EXPECT_TRUE(absl::StrContains(warning, "the link needs 50 steps per round; sync.every is 32")) << warning;

  const OverlapDecision fast = ChooseOverlap(1, {0.0001, 0.08, 0.0}, Bounds(32));
  EXPECT_EQ(fast.steps, 1);
  EXPECT_EQ(OverlapWarning(fast, {0.0001, 0.08, 0.0}, Bounds(32)), "");
  // A current value outside the bounds is brought inside.
  EXPECT_EQ(ChooseOverlap(100, {0.0001, 0.08, 0.0}, Bounds(32)).steps, 25);  // from 32: a quarter of 31
  EXPECT_EQ(ChooseOverlap(0, {0.0001, 0.08, 0.0}, Bounds(32)).steps, 1);
}

TEST(OverlapControllerTest, NothingMeasuredKeepsTheCurrentValue) {
  EXPECT_EQ(ChooseOverlap(7, {0.5, 0.0, 0.0}, Bounds(32)).steps, 7);
}

}  // namespace
}  // namespace herd
