#include "worker/train/report/straggler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace herd {
namespace {

TEST(FindStraggler, NamesTheSlowestRankAndWhatTheOthersWait) {
  // Rank 2 computes 40 ms a step; ranks 0 and 1 compute 20 ms and wait ~20 ms for it.
  const std::vector<RankStepTimes> ranks = {{0.20, 0.21, 10}, {0.21, 0.19, 10}, {0.40, 0.01, 10}};
  auto s = FindStraggler(ranks);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 2);
  EXPECT_DOUBLE_EQ(s->compute_seconds_per_step, 0.040);
  EXPECT_DOUBLE_EQ(s->median_compute_seconds_per_step, 0.021);
  EXPECT_DOUBLE_EQ(s->others_wait_seconds_per_step, 0.020);
  EXPECT_NEAR(s->step_seconds, (0.041 + 0.040 + 0.041) / 3, 1e-12);
  EXPECT_NEAR(s->holdback_fraction, 0.020 / s->step_seconds, 1e-12);
}

TEST(FindStraggler, PerStepFiguresDivideByEachRanksSteps) {
  // Rank 0 computed longer in all, but over more steps: 0.1 s vs 0.15 s a step.
  const std::vector<RankStepTimes> ranks = {{1.0, 0.0, 10}, {0.75, 0.25, 5}};
  auto s = FindStraggler(ranks);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 1);
  EXPECT_DOUBLE_EQ(s->compute_seconds_per_step, 0.15);
  EXPECT_DOUBLE_EQ(s->others_wait_seconds_per_step, 0.0);
}

TEST(FindStraggler, TiesGoToTheLowestRankAndEvenCountsTakeTheMiddleMean) {
  const std::vector<RankStepTimes> ranks = {{0.3, 0.0, 1}, {0.1, 0.2, 1}, {0.3, 0.0, 1}, {0.2, 0.1, 1}};
  auto s = FindStraggler(ranks);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 0);
  EXPECT_DOUBLE_EQ(s->median_compute_seconds_per_step, 0.25);
  EXPECT_NEAR(s->others_wait_seconds_per_step, 0.1, 1e-12);
  EXPECT_NEAR(s->holdback_fraction, 0.1 / 0.3, 1e-12);
}

TEST(FindStraggler, BalancedRanksAreHeldBackByLittle) {
  const std::vector<RankStepTimes> ranks = {{1.00, 0.01, 50}, {1.01, 0.00, 50}};
  auto s = FindStraggler(ranks);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 1);
  EXPECT_LT(s->holdback_fraction, 0.02);
}

TEST(FindStraggler, NoAnswerWithoutMeaningfulInput) {
  EXPECT_FALSE(FindStraggler({}).has_value());
  EXPECT_FALSE(FindStraggler({{1, 0, 10}}).has_value());                // one rank
  EXPECT_FALSE(FindStraggler({{1, 0, 10}, {1, 0, 0}}).has_value());     // a rank without steps
  EXPECT_FALSE(FindStraggler({{1, 0, 10}, {-1, 0, 10}}).has_value());   // negative
  EXPECT_FALSE(FindStraggler({{1, std::nan(""), 10}, {1, 0, 10}}).has_value());
  EXPECT_FALSE(FindStraggler({{std::numeric_limits<double>::infinity(), 0, 10}, {1, 0, 10}}).has_value());
  EXPECT_FALSE(FindStraggler({{0, 0, 10}, {0, 0, 10}}).has_value());   // no time at all
}

TEST(FindStraggler, HoldbackFractionStaysWithinOne) {
  // Measurement noise can make the others' wait exceed the mean step.
  const std::vector<RankStepTimes> ranks = {{0.0, 1.0, 1}, {0.0, 1.0, 1}, {0.001, 0.0, 1}};
  auto s = FindStraggler(ranks);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 2);
  EXPECT_DOUBLE_EQ(s->holdback_fraction, 1.0);
}

TEST(DescribeStepTimes, EachRanksComputeAndWaitPerStepAndItsShare) {
  EXPECT_EQ(DescribeStepTimes({{14.82, 0.22, 10}, {7.0, 0.5, 5}, {0, 0, 0}}, {4997, 4992, 2299}),
            "rank 0 1.482/0.022 s (4997), rank 1 1.400/0.100 s (4992), rank 2 - (2299)");
  EXPECT_EQ(DescribeStepTimes({{1, 2, 1}}, {}), "rank 0 1.000/2.000 s");
  EXPECT_EQ(DescribeStepTimes({}, {}), "");
}

}  // namespace
}  // namespace herd
