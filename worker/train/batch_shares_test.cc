#include "worker/train/batch_shares.h"

#include <cmath>
#include <limits>
#include <numeric>

#include "gtest/gtest.h"

namespace herd {
namespace {

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// What ranks with these rates (samples per compute second) measure over
// `steps` steps at `shares`.
std::vector<RankStepTimes> Measure(const std::vector<int64_t>& shares, const std::vector<double>& rates,
                                   int64_t steps = 10) {
  std::vector<RankStepTimes> times;
  for (size_t r = 0; r < shares.size(); ++r) {
    times.push_back({static_cast<double>(shares[r]) * steps / rates[r], 0.0, steps});
  }
  return times;
}

TEST(EqualSharesTest, SplitsEvenlyLowerRanksTakeTheRemainder) {
  EXPECT_EQ(EqualShares(96, 3), (std::vector<int64_t>{32, 32, 32}));
  EXPECT_EQ(EqualShares(100, 3), (std::vector<int64_t>{34, 33, 33}));
  EXPECT_EQ(EqualShares(2, 3), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_TRUE(EqualShares(10, 0).empty());
}

TEST(ThroughputSharesTest, AHalfSpeedRankGetsHalfTheShareAndTheSumIsKept) {
  const std::vector<int64_t> equal = EqualShares(96, 3);
  const std::vector<double> rates = {100, 100, 50};
  const auto planned = PlanThroughputShares(equal, Measure(equal, rates));
  ASSERT_TRUE(planned.has_value());
  EXPECT_EQ(Sum(*planned), 96);
  // 96 * (0.4, 0.4, 0.2) = 38.4, 38.4, 19.2: floors, then the largest remainder (rank 0 on the tie).
  EXPECT_EQ(*planned, (std::vector<int64_t>{39, 38, 19}));
  // Measured again at the new shares, nothing changes: no flapping.
  EXPECT_FALSE(PlanThroughputShares(*planned, Measure(*planned, rates)).has_value());
}

TEST(ThroughputSharesTest, SmallDifferencesKeepTheShares) {
  const std::vector<int64_t> equal = EqualShares(96, 3);
  // 5% slower: a re-plan would gain 2%, less than kMinShareReplanGain.
  EXPECT_FALSE(PlanThroughputShares(equal, Measure(equal, {100, 100, 95})).has_value());
  // The same ranks 30% slower do re-plan.
  EXPECT_TRUE(PlanThroughputShares(equal, Measure(equal, {100, 100, 70})).has_value());
}

TEST(ThroughputSharesTest, EveryRankKeepsAtLeastOneSample) {
  const std::vector<int64_t> equal = EqualShares(8, 4);
  const auto planned = PlanThroughputShares(equal, Measure(equal, {1e6, 1e6, 1e6, 1}));
  ASSERT_TRUE(planned.has_value());
  EXPECT_EQ(Sum(*planned), 8);
  for (int64_t share : *planned) EXPECT_GE(share, 1);
  EXPECT_EQ((*planned)[3], 1);
}

TEST(ThroughputSharesTest, FollowsARankThatRecovers) {
  const std::vector<int64_t> skewed = {40, 40, 16};
  // All three now run at the same rate: back towards equal shares.
  const auto planned = PlanThroughputShares(skewed, Measure(skewed, {100, 100, 100}));
  ASSERT_TRUE(planned.has_value());
  EXPECT_EQ(*planned, (std::vector<int64_t>{32, 32, 32}));
}

// What ranks whose compute per step is fixed + per_sample * share measure.
std::vector<RankStepTimes> MeasureLinear(const std::vector<int64_t>& shares, const std::vector<StepTimeModel>& ranks,
                                         int64_t steps = 10) {
  std::vector<RankStepTimes> times;
  for (size_t r = 0; r < shares.size(); ++r) {
    times.push_back({ranks[r].At(static_cast<double>(shares[r])) * static_cast<double>(steps), 0.0, steps});
  }
  return times;
}

std::vector<std::optional<ShareMeasurement>> Earlier(const std::vector<int64_t>& shares,
                                                     const std::vector<StepTimeModel>& ranks) {
  std::vector<std::optional<ShareMeasurement>> earlier;
  for (size_t r = 0; r < shares.size(); ++r) {
    earlier.push_back(ShareMeasurement{shares[r], ranks[r].At(static_cast<double>(shares[r]))});
  }
  return earlier;
}

double Slowest(const std::vector<int64_t>& shares, const std::vector<StepTimeModel>& ranks) {
  double worst = 0;
  for (size_t r = 0; r < shares.size(); ++r) worst = std::max(worst, ranks[r].At(static_cast<double>(shares[r])));
  return worst;
}

TEST(FitStepTimeTest, TwoSharesFarEnoughApartGiveTheLine) {
  const StepTimeModel fit = FitStepTime({40, 0.05}, ShareMeasurement{32, 0.042});
  EXPECT_NEAR(fit.fixed_seconds, 0.01, 1e-12);
  EXPECT_NEAR(fit.per_sample_seconds, 0.001, 1e-12);
}

TEST(FitStepTimeTest, OtherwiseTimeIsProportionalToTheShare) {
  const StepTimeModel proportional{0.0, 0.05 / 40};
  auto same = [&](const StepTimeModel& m) {
    EXPECT_EQ(m.fixed_seconds, proportional.fixed_seconds);
    EXPECT_DOUBLE_EQ(m.per_sample_seconds, proportional.per_sample_seconds);
  };
  same(FitStepTime({40, 0.05}, std::nullopt));
  same(FitStepTime({40, 0.05}, ShareMeasurement{38, 0.048}));  // 5% apart: mostly noise
  same(FitStepTime({40, 0.05}, ShareMeasurement{32, 0.06}));   // slower with fewer samples
  same(FitStepTime({40, 0.05}, ShareMeasurement{32, 0.02}));   // a negative fixed part
  same(FitStepTime({40, 0.05}, ShareMeasurement{0, 0.02}));    // no share
  same(FitStepTime({40, 0.05}, ShareMeasurement{32, std::numeric_limits<double>::infinity()}));
}

// Ranks with a fixed cost per step, the last at half speed in both parts (a
// duty-cycled process): proportional shares leave it the slowest; with the
// interval before as a second measurement, the next re-plan equalizes.
TEST(ThroughputSharesTest, AFixedCostPerStepIsFittedFromTwoIntervals) {
  const std::vector<StepTimeModel> ranks = {{0.01, 0.001}, {0.01, 0.001}, {0.02, 0.002}};
  const std::vector<int64_t> equal = EqualShares(96, 3);
  const auto first = PlanThroughputShares(equal, MeasureLinear(equal, ranks));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, (std::vector<int64_t>{39, 38, 19}));  // proportional to the rates measured at equal shares
  // The slow rank still takes 0.058 s against the others' 0.049 and 0.048.
  EXPECT_NEAR(Slowest(*first, ranks), 0.058, 1e-9);
  // From that interval alone (proportional again) the re-plan overshoots less but still leaves the slow
  // rank the slowest: 16 samples at 0.052 s.
  const auto proportional = PlanThroughputShares(*first, MeasureLinear(*first, ranks));
  ASSERT_TRUE(proportional.has_value());
  EXPECT_EQ(*proportional, (std::vector<int64_t>{40, 40, 16}));
  EXPECT_NEAR(Slowest(*proportional, ranks), 0.052, 1e-9);
  // With the equal-shares interval as the earlier measurement, the fit finds the fixed parts.
  const auto second = PlanThroughputShares(*first, MeasureLinear(*first, ranks), Earlier(equal, ranks));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(std::accumulate(second->begin(), second->end(), int64_t{0}), 96);
  // The exact optimum is 40.4, 40.4, 15.2 samples at 0.0504 s.
  EXPECT_EQ(*second, (std::vector<int64_t>{41, 40, 15}));
  EXPECT_NEAR(Slowest(*second, ranks), 0.051, 1e-9);
  // And there it stays.
  EXPECT_FALSE(
      PlanThroughputShares(*second, MeasureLinear(*second, ranks), Earlier(*first, ranks)).has_value());
}

TEST(ThroughputSharesTest, NoValidMeasurementNoPlan) {
  const std::vector<int64_t> equal = EqualShares(96, 3);
  auto times = Measure(equal, {100, 100, 50});
  times[1].steps = 0;
  EXPECT_FALSE(PlanThroughputShares(equal, times).has_value());
  times = Measure(equal, {100, 100, 50});
  times[2].compute_seconds = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(PlanThroughputShares(equal, times).has_value());
  times[2].compute_seconds = -1;
  EXPECT_FALSE(PlanThroughputShares(equal, times).has_value());
  EXPECT_FALSE(PlanThroughputShares(equal, Measure({32, 32}, {100, 100})).has_value());  // sizes differ
  EXPECT_FALSE(PlanThroughputShares({96}, Measure({96}, {100})).has_value());              // one rank
  EXPECT_FALSE(PlanThroughputShares({1, 1, 0}, Measure({1, 1, 1}, {100, 100, 1})).has_value());  // sum < world
}

}  // namespace
}  // namespace herd
