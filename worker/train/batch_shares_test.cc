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
  EXPECT_EQ(*planned, (std::vector<int64_t>{38, 38, 20}));  // 1 + 93 * (0.4, 0.4, 0.2), largest remainders
  // Measured again at the new shares, nothing changes: no flapping.
  EXPECT_FALSE(PlanThroughputShares(*planned, Measure(*planned, rates)).has_value());
}

TEST(ThroughputSharesTest, SmallDifferencesKeepTheShares) {
  const std::vector<int64_t> equal = EqualShares(96, 3);
  // 5% slower: a re-plan would gain less than kMinShareReplanGain.
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
