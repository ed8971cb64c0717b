#include "worker/train/batches/batch_shares.h"

#include <cmath>
#include <limits>
#include <numeric>
#include <random>

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

TEST(IslandSharesTest, EachIslandTakesAnEqualPartWhateverItsSize) {
  // Two islands of two: as EqualShares.
  EXPECT_EQ(IslandShares(64, {0, 0, 1, 1}), (std::vector<int64_t>{16, 16, 16, 16}));
  // Island 1 lost a member: its one rank takes its island's half.
  EXPECT_EQ(IslandShares(64, {0, 0, 1}), (std::vector<int64_t>{16, 16, 32}));
  // Remainders: the lower island, then the lower rank within it.
  EXPECT_EQ(IslandShares(67, {0, 0, 0, 1}), (std::vector<int64_t>{12, 11, 11, 33}));
  // Ranks need not be grouped; one island is EqualShares.
  EXPECT_EQ(IslandShares(10, {1, 0, 1}), (std::vector<int64_t>{3, 5, 2}));
  EXPECT_EQ(IslandShares(10, {0, 0, 0}), EqualShares(10, 3));
  EXPECT_TRUE(IslandShares(10, {}).empty());
  EXPECT_TRUE(IslandShares(10, {0, -1}).empty());
}

TEST(ThroughputSharesTest, AHalfSpeedRankGetsHalfTheShareAndTheSumIsKept) {
  const std::vector<int64_t> equal = EqualShares(96, 3);
  const std::vector<double> rates = {100, 100, 50};
  const SharePlan plan = PlanThroughputShares(equal, Measure(equal, rates));
  ASSERT_TRUE(plan.shares.has_value());
  EXPECT_EQ(Sum(*plan.shares), 96);
  // 96 * (0.4, 0.4, 0.2) = 38.4, 38.4, 19.2: floors, then the largest remainder (rank 0 on the tie).
  EXPECT_EQ(*plan.shares, (std::vector<int64_t>{39, 38, 19}));
  ASSERT_EQ(plan.history.targets.size(), 3u);
  EXPECT_NEAR(plan.history.targets[2], 0.2, 1e-12);
  // Measured again at the new shares, nothing changes: no flapping.
  const SharePlan again = PlanThroughputShares(*plan.shares, Measure(*plan.shares, rates), plan.history);
  EXPECT_FALSE(again.shares.has_value());
}

TEST(ThroughputSharesTest, SmallDifferencesKeepTheShares) {
  const std::vector<int64_t> equal = EqualShares(96, 3);
  // 5% slower: the best re-plan, [33, 32, 31], would gain 2%, less than kMinShareReplanGain.
  EXPECT_FALSE(PlanThroughputShares(equal, Measure(equal, {100, 100, 95})).shares.has_value());
  // The same rank 30% slower does re-plan.
  EXPECT_TRUE(PlanThroughputShares(equal, Measure(equal, {100, 100, 70})).shares.has_value());
}

TEST(ThroughputSharesTest, EveryRankKeepsAtLeastOneSample) {
  const std::vector<int64_t> equal = EqualShares(8, 4);
  const SharePlan plan = PlanThroughputShares(equal, Measure(equal, {1e6, 1e6, 1e6, 1}));
  ASSERT_TRUE(plan.shares.has_value());
  EXPECT_EQ(Sum(*plan.shares), 8);
  for (int64_t share : *plan.shares) EXPECT_GE(share, 1);
  EXPECT_EQ((*plan.shares)[3], 1);
}

TEST(ThroughputSharesTest, FollowsARankThatRecoversInSmoothedSteps) {
  const std::vector<int64_t> skewed = {40, 40, 16};
  const std::vector<double> rates = {100, 100, 100};  // all three now run at the same rate
  // Without history (a generation's first plan) straight to equal shares.
  EXPECT_EQ(*PlanThroughputShares(skewed, Measure(skewed, rates)).shares, (std::vector<int64_t>{32, 32, 32}));
  // With the targets that made these shares, half of the way: (0.4 + 1/3) / 2 and (1/6 + 1/3) / 2 of 96.
  const ShareHistory before{{40.0 / 96, 40.0 / 96, 16.0 / 96}};
  const SharePlan first = PlanThroughputShares(skewed, Measure(skewed, rates), before);
  ASSERT_TRUE(first.shares.has_value());
  EXPECT_EQ(*first.shares, (std::vector<int64_t>{36, 36, 24}));
  // And on from there until it gets there.
  std::vector<int64_t> shares = *first.shares;
  ShareHistory history = first.history;
  for (int i = 0; i < 10; ++i) {
    SharePlan next = PlanThroughputShares(shares, Measure(shares, rates), history);
    history = next.history;
    if (next.shares.has_value()) shares = *next.shares;
  }
  for (int64_t share : shares) EXPECT_NEAR(static_cast<double>(share), 32, 1);
}

// What ranks whose compute per step is fixed + per_sample * share measure.
struct LinearRank {
  double fixed_seconds;
  double per_sample_seconds;
  double At(int64_t share) const { return fixed_seconds + per_sample_seconds * static_cast<double>(share); }
};

std::vector<RankStepTimes> MeasureLinear(const std::vector<int64_t>& shares, const std::vector<LinearRank>& ranks,
                                         double speed = 1, int64_t steps = 10) {
  std::vector<RankStepTimes> times;
  for (size_t r = 0; r < shares.size(); ++r) {
    times.push_back({ranks[r].At(shares[r]) * static_cast<double>(steps) / speed, 0.0, steps});
  }
  return times;
}

double Slowest(const std::vector<int64_t>& shares, const std::vector<LinearRank>& ranks) {
  double worst = 0;
  for (size_t r = 0; r < shares.size(); ++r) worst = std::max(worst, ranks[r].At(shares[r]));
  return worst;
}

// Ranks with a fixed cost per step, the last at half speed in both parts (a
// duty-cycled process). Proportional shares under-correct for the fixed
// cost; re-planned at each commit point they converge on equal compute times.
TEST(ThroughputSharesTest, ConvergesOnEqualComputeTimesDespiteAFixedCostPerStep) {
  const std::vector<LinearRank> ranks = {{0.05, 0.001}, {0.05, 0.001}, {0.1, 0.002}};
  std::vector<int64_t> shares = EqualShares(960, 3);
  const SharePlan first = PlanThroughputShares(shares, MeasureLinear(shares, ranks));
  ASSERT_TRUE(first.shares.has_value());
  EXPECT_EQ(*first.shares, (std::vector<int64_t>{384, 384, 192}));  // proportional to the rates at equal shares
  // The slow rank then takes 0.484 s against the others' 0.434.
  EXPECT_NEAR(Slowest(*first.shares, ranks), 0.484, 1e-9);
  shares = *first.shares;
  ShareHistory history = first.history;
  int replans = 0;
  for (int i = 0; i < 20; ++i) {
    SharePlan next = PlanThroughputShares(shares, MeasureLinear(shares, ranks), history);
    history = next.history;
    if (next.shares.has_value()) {
      shares = *next.shares;
      ++replans;
    }
  }
  EXPECT_EQ(Sum(shares), 960);
  EXPECT_GE(replans, 1);
  // The optimum: 394, 394, 172 samples at 0.444 s. Within kMinPersistentReplanGain of it: the
  // under-correction keeps the same rank the slowest, so it is re-planned on below kMinShareReplanGain.
  EXPECT_LT(Slowest(shares, ranks), 0.444 * (1 + kMinPersistentReplanGain));
  EXPECT_LT(Slowest(shares, ranks), Slowest(*first.shares, ranks));
  // Settled: the next interval changes nothing.
  EXPECT_FALSE(PlanThroughputShares(shares, MeasureLinear(shares, ranks), history).shares.has_value());
}

TEST(ThroughputSharesTest, ASpeedChangeCommonToAllRanksMovesNothing) {
  const std::vector<double> rates = {100, 100, 50};
  const std::vector<int64_t> shares = {384, 384, 192};
  const SharePlan settled = PlanThroughputShares(shares, Measure(shares, rates));
  EXPECT_FALSE(settled.shares.has_value());
  // The whole machine 40% slower, or 2x faster, in the next interval: same ratios, same targets.
  for (double speed : {0.6, 2.0}) {
    const std::vector<double> scaled = {100 * speed, 100 * speed, 50 * speed};
    const SharePlan next = PlanThroughputShares(shares, Measure(shares, scaled), settled.history);
    EXPECT_FALSE(next.shares.has_value()) << speed;
    for (size_t r = 0; r < 3; ++r) EXPECT_NEAR(next.history.targets[r], settled.history.targets[r], 1e-12);
  }
}

TEST(ThroughputSharesTest, OneNoisyIntervalMovesTheSharesOnlyPartWay) {
  const std::vector<int64_t> shares = {400, 400, 200};
  const ShareHistory targets{{0.4, 0.4, 0.2}};
  // Rank 1 looks 25% slower for one interval: its raw target falls from 0.4 to 1/3 (of 80 + 100 + 50 ...).
  const std::vector<double> noisy = {100, 75, 50};
  const SharePlan raw = PlanThroughputShares(shares, Measure(shares, noisy));
  const SharePlan smoothed = PlanThroughputShares(shares, Measure(shares, noisy), targets);
  ASSERT_TRUE(raw.shares.has_value());
  ASSERT_TRUE(smoothed.shares.has_value());
  EXPECT_EQ(*raw.shares, (std::vector<int64_t>{445, 333, 222}));       // 1000 * (100, 75, 50) / 225
  EXPECT_EQ(*smoothed.shares, (std::vector<int64_t>{422, 367, 211}));  // half of the way there
}

// Runs `intervals` commit points on ranks with these rates per interval
// (cycling through `rates_by_interval`) from settled shares and targets;
// returns how many re-planned, and leaves the shares in `shares`.
int Replans(std::vector<int64_t>* shares, const std::vector<std::vector<double>>& rates_by_interval, int intervals) {
  ShareHistory history;
  for (int64_t share : *shares) history.targets.push_back(static_cast<double>(share) / static_cast<double>(Sum(*shares)));
  int replans = 0;
  for (int i = 0; i < intervals; ++i) {
    const SharePlan plan = PlanThroughputShares(*shares, Measure(*shares, rates_by_interval[i % rates_by_interval.size()]), history);
    history = plan.history;
    if (plan.shares.has_value()) {
      *shares = *plan.shares;
      ++replans;
    }
  }
  return replans;
}

// Rank 2 trains 3% slower than its share assumes, every interval: a re-plan
// gains 2.4%, under kMinShareReplanGain even once the smoothed targets have
// caught up. The same rank bounding kPersistentIntervals intervals in a row
// re-plans at the third, to what the interval measured, and then it stays.
TEST(ThroughputSharesTest, ASmallImbalanceThatPersistsIsReplannedAtTheThirdInterval) {
  static_assert(kPersistentIntervals == 3);
  const std::vector<double> rates = {100, 100, 48.5};
  std::vector<int64_t> shares = {400, 400, 200};
  const ShareHistory settled{{0.4, 0.4, 0.2}};
  const SharePlan first = PlanThroughputShares(shares, Measure(shares, rates), settled);
  EXPECT_FALSE(first.shares.has_value());
  EXPECT_EQ(first.history.bounding_rank, 2);
  EXPECT_EQ(first.history.bounding_intervals, 1);
  const SharePlan second = PlanThroughputShares(shares, Measure(shares, rates), first.history);
  EXPECT_FALSE(second.shares.has_value());
  EXPECT_EQ(second.history.bounding_intervals, 2);
  const SharePlan third = PlanThroughputShares(shares, Measure(shares, rates), second.history);
  ASSERT_TRUE(third.shares.has_value());
  // 1000 * (100, 100, 48.5) / 248.5 = 402.4, 402.4, 195.2.
  EXPECT_EQ(*third.shares, (std::vector<int64_t>{403, 402, 195}));
  EXPECT_NEAR(third.history.targets[2], 48.5 / 248.5, 1e-12);
  // Without the rule it never would: the smoothed targets approach the same 2.4% from below.
  ShareHistory history = settled;
  for (int i = 0; i < 10; ++i) {
    const SharePlan plan = PlanThroughputShares(shares, Measure(shares, rates), history, kMinShareReplanGain);
    history = {plan.history.targets, -1};  // forget the bounding rank: the threshold alone
    EXPECT_FALSE(plan.shares.has_value()) << i;
  }
  // From the new shares on, nothing more to gain.
  shares = *third.shares;
  EXPECT_EQ(Replans(&shares, {rates}, 10), 0);
  EXPECT_EQ(shares, (std::vector<int64_t>{403, 402, 195}));
}

// Noise: a different rank looks 2% slow in each interval. The bounding rank
// never repeats, and the smoothed gain stays under kMinShareReplanGain.
TEST(ThroughputSharesTest, NoiseThatMovesTheBoundingRankKeepsTheShares) {
  std::vector<int64_t> shares = {400, 400, 200};
  EXPECT_EQ(Replans(&shares, {{98, 100, 50}, {100, 98, 50}, {100, 100, 49}}, 30), 0);
  EXPECT_EQ(shares, (std::vector<int64_t>{400, 400, 200}));
}

// Ranks whose compute per step is fixed + per sample, each interval's
// measurement off by a factor exp(N(0, noise)) per rank, from equal shares
// over `intervals` commit points. Returns the re-plans after the first plan
// and the mean, over the intervals after the first, of the true imbalance:
// 1 - mean compute / the slowest rank's compute.
struct NoisyRun {
  int replans = 0;
  double imbalance = 0;
};
NoisyRun RunNoisy(const std::vector<LinearRank>& ranks, double noise, int intervals, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<double> normal(0, noise);
  std::vector<int64_t> shares = EqualShares(3000, static_cast<int>(ranks.size()));
  ShareHistory history;
  NoisyRun run;
  for (int i = 0; i < intervals; ++i) {
    std::vector<RankStepTimes> times = MeasureLinear(shares, ranks);
    for (RankStepTimes& t : times) t.compute_seconds *= std::exp(normal(random));
    if (i > 0) {
      double sum = 0;
      for (size_t r = 0; r < ranks.size(); ++r) sum += ranks[r].At(shares[r]);
      run.imbalance += 1 - sum / static_cast<double>(ranks.size()) / Slowest(shares, ranks);
    }
    const SharePlan plan = PlanThroughputShares(shares, times, history);
    history = plan.history;
    if (plan.shares.has_value()) {
      shares = *plan.shares;
      if (i > 0) ++run.replans;
    }
  }
  run.imbalance /= intervals - 1;
  return run;
}

// Three equally fast ranks measured with 1.5% noise per interval (the
// 2-core machine's throttled bench, equal shares: 1-3% apart from interval
// to interval): the shares hardly ever move. Same bounding rank twice in a
// row with a 1% floor re-planned on about one interval in five.
TEST(ThroughputSharesTest, NoisyIntervalsOfEqualRanksRarelyReplan) {
  const std::vector<LinearRank> ranks(3, {0.0, 0.001});
  int replans = 0;
  for (uint32_t seed = 1; seed <= 10; ++seed) replans += RunNoisy(ranks, 0.015, 200, seed).replans;
  EXPECT_LE(replans, 40) << "re-plans in 2000 intervals";
}

// One rank at half speed and a fixed cost per step, measured with 0.5%
// noise: the fixed cost's under-correction leaves an imbalance under
// kMinShareReplanGain that the persistent rule removes, over the whole run
// and over a run as short as the straggler bench's (7 intervals).
TEST(ThroughputSharesTest, NoisyIntervalsOfAPersistentImbalanceAreCorrected) {
  const std::vector<LinearRank> ranks = {{0.1, 0.001}, {0.1, 0.001}, {0.2, 0.002}};
  double long_runs = 0;
  double short_runs = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) long_runs += RunNoisy(ranks, 0.005, 100, seed).imbalance / 20;
  for (uint32_t seed = 1; seed <= 200; ++seed) short_runs += RunNoisy(ranks, 0.005, 7, seed).imbalance / 200;
  EXPECT_LT(long_runs, 0.008);
  EXPECT_LT(short_runs, 0.025);
}

// The same rank slow in two intervals of every three, another in the third:
// never three in a row, so no re-plan.
TEST(ThroughputSharesTest, TwoIntervalsInARowAreNotEnough) {
  std::vector<int64_t> shares = {400, 400, 200};
  EXPECT_EQ(Replans(&shares, {{100, 100, 48.5}, {100, 100, 48.5}, {97, 100, 50}}, 30), 0);
  EXPECT_EQ(shares, (std::vector<int64_t>{400, 400, 200}));
}

// The same rank 1.5% slow every interval: a re-plan would gain 1.2%, below
// kMinPersistentReplanGain, not worth a change of shares.
TEST(ThroughputSharesTest, APersistentImbalanceBelowTheFloorKeepsTheShares) {
  std::vector<int64_t> shares = {400, 400, 200};
  EXPECT_EQ(Replans(&shares, {{100, 100, 49.25}}, 10), 0);
  EXPECT_EQ(shares, (std::vector<int64_t>{400, 400, 200}));
}

TEST(ThroughputSharesTest, NoValidMeasurementNoPlanAndTheTargetsAreKept) {
  const std::vector<int64_t> equal = EqualShares(96, 3);
  const ShareHistory before{{0.5, 0.3, 0.2}, 2, 2};
  auto keeps = [&](const std::vector<int64_t>& current, const std::vector<RankStepTimes>& times) {
    const SharePlan plan = PlanThroughputShares(current, times, before);
    EXPECT_FALSE(plan.shares.has_value());
    EXPECT_EQ(plan.history.targets, before.targets);
    EXPECT_EQ(plan.history.bounding_rank, before.bounding_rank);
    EXPECT_EQ(plan.history.bounding_intervals, before.bounding_intervals);
  };
  auto times = Measure(equal, {100, 100, 50});
  times[1].steps = 0;
  keeps(equal, times);
  times = Measure(equal, {100, 100, 50});
  times[2].compute_seconds = std::numeric_limits<double>::quiet_NaN();
  keeps(equal, times);
  times[2].compute_seconds = -1;
  keeps(equal, times);
  keeps(equal, Measure({32, 32}, {100, 100}));                 // sizes differ
  keeps({96}, Measure({96}, {100}));                            // one rank
  keeps({1, 1, 0}, Measure({1, 1, 1}, {100, 100, 1}));          // sum < world
}

}  // namespace
}  // namespace herd
