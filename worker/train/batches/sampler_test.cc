#include "worker/train/batches/sampler.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace herd {
namespace {

// Walks one epoch from `position` to its end with world size `world`,
// appending every rank's samples to `used`; returns the number of steps.
int WalkEpoch(const EpochSampler& sampler, int64_t epoch, int64_t& position, int world, int64_t batch,
              std::vector<int64_t>& used, int max_steps = 1 << 30) {
  int steps = 0;
  while (position < sampler.dataset_size() && steps < max_steps) {
    int64_t global = -1;
    int64_t taken = 0;
    for (int rank = 0; rank < world; ++rank) {
      StepSlice slice = sampler.Slice(epoch, position, world, rank, batch);
      if (global >= 0) {
        EXPECT_EQ(slice.global_count, global) << "ranks disagree on the step size";
      }
      global = slice.global_count;
      EXPECT_LE(static_cast<int64_t>(slice.indices.size()), batch);
      taken += slice.indices.size();
      used.insert(used.end(), slice.indices.begin(), slice.indices.end());
    }
    EXPECT_EQ(taken, global);
    EXPECT_GT(global, 0);
    position += global;
    ++steps;
  }
  return steps;
}

void ExpectEachIndexOnce(std::vector<int64_t> used, int64_t n) {
  ASSERT_EQ(static_cast<int64_t>(used.size()), n);
  std::sort(used.begin(), used.end());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(used[i], i);
}

TEST(EpochPermutationTest, IsAPermutation) {
  for (int64_t n : {0, 1, 2, 17, 1000}) {
    std::vector<int64_t> order = EpochPermutation(n, 42, 3);
    ExpectEachIndexOnce(order, n);
  }
}

TEST(EpochPermutationTest, PureFunctionOfSeedAndEpoch) {
  EXPECT_EQ(EpochPermutation(500, 7, 0), EpochPermutation(500, 7, 0));
  EXPECT_NE(EpochPermutation(500, 7, 0), EpochPermutation(500, 7, 1));
  EXPECT_NE(EpochPermutation(500, 7, 0), EpochPermutation(500, 8, 0));
  // Epochs are not shifts of each other or of the identity.
  std::vector<int64_t> identity(500);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(EpochPermutation(500, 7, 0), identity);
}

TEST(EpochPermutationTest, PinnedValuesCatchAccidentalChanges) {
  // Every machine must produce this exact order; a change here silently
  // reorders every job's data after an upgrade.
  const std::vector<int64_t> order = EpochPermutation(10, 1234, 5);
  EXPECT_EQ(order, (std::vector<int64_t>{5, 3, 7, 8, 0, 1, 4, 2, 6, 9}));
  const std::vector<int64_t> large = EpochPermutation(1000000, 1, 0);
  EXPECT_EQ(large[0], 165390);
  EXPECT_EQ(large[999999], 975509);
}

TEST(EpochPermutationTest, LooksUniform) {
  // Position of element 0 over many seeds: roughly uniform over 8 slots.
  std::vector<int> counts(8, 0);
  for (uint64_t seed = 0; seed < 8000; ++seed) {
    std::vector<int64_t> order = EpochPermutation(8, seed, 0);
    counts[std::find(order.begin(), order.end(), 0) - order.begin()]++;
  }
  for (int c : counts) {
    EXPECT_GT(c, 850);
    EXPECT_LT(c, 1150);
  }
}

struct WalkCase {
  int world;
  int64_t batch;
};

class EpochWalkTest : public ::testing::TestWithParam<WalkCase> {};

TEST_P(EpochWalkTest, EveryIndexExactlyOncePerEpoch) {
  const auto [world, batch] = GetParam();
  for (int64_t n : {int64_t{60}, int64_t{61}, int64_t{97}}) {
    EpochSampler sampler(n, 99);
    for (int64_t epoch : {0, 1}) {
      int64_t position = 0;
      std::vector<int64_t> used;
      const int steps = WalkEpoch(sampler, epoch, position, world, batch, used);
      EXPECT_EQ(steps, (n + world * batch - 1) / (world * batch));
      ExpectEachIndexOnce(used, n);
    }
  }
}

TEST_P(EpochWalkTest, RankSlicesUnionEqualsTheSingleWorkerBigBatch) {
  const auto [world, batch] = GetParam();
  const int64_t n = 61;
  EpochSampler sampler(n, 5);
  for (int64_t position = 0; position < n; position += world * batch) {
    StepSlice whole = sampler.Slice(2, position, 1, 0, world * batch);
    std::vector<int64_t> joined;
    for (int rank = 0; rank < world; ++rank) {
      StepSlice part = sampler.Slice(2, position, world, rank, batch);
      EXPECT_EQ(part.global_count, whole.global_count);
      joined.insert(joined.end(), part.indices.begin(), part.indices.end());
    }
    // Same samples in the same order: concatenating ranks gives the big batch.
    EXPECT_EQ(joined, whole.indices) << "position " << position;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EpochWalkTest,
                         ::testing::Values(WalkCase{1, 4}, WalkCase{1, 7}, WalkCase{2, 5}, WalkCase{2, 8},
                                           WalkCase{3, 4}, WalkCase{3, 7}));

TEST(EpochSamplerTest, FollowsTheEpochPermutation) {
  EpochSampler sampler(50, 11);
  StepSlice slice = sampler.Slice(3, 0, 1, 0, 50);
  EXPECT_EQ(slice.indices, EpochPermutation(50, 11, 3));
  EXPECT_EQ(slice.global_count, 50);
}

TEST(EpochSamplerTest, SameSeedSameOrderDifferentSeedOrEpochDifferentOrder) {
  EpochSampler a(100, 1), b(100, 1), c(100, 2);
  EXPECT_EQ(a.Slice(0, 0, 2, 1, 20).indices, b.Slice(0, 0, 2, 1, 20).indices);
  EXPECT_NE(a.Slice(0, 0, 2, 1, 20).indices, c.Slice(0, 0, 2, 1, 20).indices);
  EXPECT_NE(a.Slice(0, 0, 2, 1, 20).indices, a.Slice(1, 0, 2, 1, 20).indices);
  // Going back to an earlier epoch (a rollback) gives that epoch's order again.
  EXPECT_EQ(a.Slice(0, 40, 2, 0, 20).indices, b.Slice(0, 40, 2, 0, 20).indices);
}

TEST(EpochSamplerTest, LastShortStepSpreadsOverRanks) {
  EpochSampler sampler(10, 3);
  // Position 8: two samples left for three ranks with batch 4: ceil(2/3) = 1 each.
  EXPECT_EQ(sampler.Slice(0, 8, 3, 0, 4).indices.size(), 1u);
  EXPECT_EQ(sampler.Slice(0, 8, 3, 1, 4).indices.size(), 1u);
  EXPECT_TRUE(sampler.Slice(0, 8, 3, 2, 4).indices.empty());
  EXPECT_EQ(sampler.Slice(0, 8, 3, 2, 4).global_count, 2);
  // Past the end: nothing.
  EXPECT_EQ(sampler.Slice(0, 10, 3, 0, 4).global_count, 0);
  EXPECT_TRUE(sampler.Slice(0, 10, 3, 0, 4).indices.empty());
}

TEST(EpochSamplerTest, WorldSizeChangeMidEpochStillUsesEveryIndexOnce) {
  const int64_t n = 103;
  EpochSampler sampler(n, 77);
  std::vector<int64_t> used;
  int64_t position = 0;
  WalkEpoch(sampler, 4, position, /*world=*/3, /*batch=*/5, used, /*max_steps=*/3);  // 45 samples
  EXPECT_EQ(position, 45);
  WalkEpoch(sampler, 4, position, /*world=*/2, /*batch=*/6, used, /*max_steps=*/2);  // 24 more
  EXPECT_EQ(position, 69);
  WalkEpoch(sampler, 4, position, /*world=*/4, /*batch=*/3, used);  // the rest
  EXPECT_EQ(position, n);
  ExpectEachIndexOnce(used, n);
}

TEST(EpochSamplerTest, BadArgumentsGiveAnEmptySlice) {
  EpochSampler sampler(10, 0);
  EXPECT_TRUE(sampler.Slice(0, 0, 2, 2, 4).indices.empty());
  EXPECT_TRUE(sampler.Slice(0, 0, 0, 0, 4).indices.empty());
  EXPECT_TRUE(sampler.Slice(0, 0, 2, 0, 0).indices.empty());
}

// Walks one epoch with PlanStep, each step's shares from `shares_at(step)`,
// checking what every rank's plan promises; appends the samples to `used`.
template <typename SharesAt>
void WalkEpochByShares(const EpochSampler& sampler, int64_t epoch, SharesAt shares_at, int64_t micro,
                       std::vector<int64_t>& used) {
  int64_t position = 0;
  for (int step = 0; position < sampler.dataset_size(); ++step) {
    const std::vector<int64_t> shares = shares_at(step);
    const int64_t total = std::accumulate(shares.begin(), shares.end(), int64_t{0});
    size_t rounds = 0;
    int64_t taken = 0;
    for (int rank = 0; rank < static_cast<int>(shares.size()); ++rank) {
      const StepPlan plan = sampler.PlanStep(epoch, position, shares, rank, micro);
      EXPECT_EQ(plan.global_count, std::min(total, sampler.dataset_size() - position));
      if (rank == 0) rounds = plan.micro_batches.size();
      EXPECT_EQ(plan.micro_batches.size(), rounds) << "ranks disagree on the number of micro-batches";
      int64_t mine = 0;
      for (const auto& micro_batch : plan.micro_batches) {
        EXPECT_LE(static_cast<int64_t>(micro_batch.size()), micro);
        mine += static_cast<int64_t>(micro_batch.size());
        used.insert(used.end(), micro_batch.begin(), micro_batch.end());
      }
      if (plan.global_count == total) {
        EXPECT_EQ(mine, shares[rank]) << "a full step gives each rank its share";
      }
      taken += mine;
    }
    ASSERT_EQ(taken, std::min(total, sampler.dataset_size() - position));
    position += taken;
  }
}

TEST(PlanStepTest, UnevenSharesUseEveryIndexOncePerEpoch) {
  for (int64_t n : {int64_t{60}, int64_t{97}, int64_t{211}}) {
    EpochSampler sampler(n, 13);
    for (int64_t micro : {int64_t{1}, int64_t{4}, int64_t{7}}) {
      std::vector<int64_t> used;
      WalkEpochByShares(sampler, 1, [](int) { return std::vector<int64_t>{5, 1, 9}; }, micro, used);
      ExpectEachIndexOnce(used, n);
    }
  }
}

TEST(PlanStepTest, SharesAndWorldChangingEveryStepStillUseEveryIndexOnce) {
  const std::vector<std::vector<int64_t>> plans = {{8, 8}, {12, 4, 0}, {3, 3, 3, 7}, {16}, {1, 15}};
  EpochSampler sampler(157, 21);
  std::vector<int64_t> used;
  WalkEpochByShares(sampler, 0, [&](int step) { return plans[step % plans.size()]; }, 5, used);
  ExpectEachIndexOnce(used, 157);
}

TEST(PlanStepTest, EqualSharesAreMicroRoundsOfSlices) {
  // The layout grad_accumulation always had: A micro-rounds, each split
  // among the ranks as Slice splits a step of world * batch samples.
  EpochSampler sampler(500, 3);
  for (int world : {1, 2, 3}) {
    for (int64_t batch : {3, 4}) {
      for (int64_t accumulation : {1, 2, 3}) {
        const std::vector<int64_t> shares(world, batch * accumulation);
        for (int64_t position = 0; position + world * batch * accumulation <= 500;
             position += world * batch * accumulation) {
          for (int rank = 0; rank < world; ++rank) {
            const StepPlan plan = sampler.PlanStep(0, position, shares, rank, batch);
            ASSERT_EQ(plan.micro_batches.size(), static_cast<size_t>(accumulation));
            for (int64_t k = 0; k < accumulation; ++k) {
              EXPECT_EQ(plan.micro_batches[k], sampler.Slice(0, position + k * world * batch, world, rank, batch).indices);
            }
          }
        }
      }
    }
  }
}

TEST(PlanStepTest, ShortLastStepSplitsByShares) {
  EpochSampler sampler(20, 8);
  // 4 left of a 16-sample step with shares 12 and 4: ceil(4*12/16) = 3 and 1.
  EXPECT_EQ(sampler.PlanStep(0, 16, {12, 4}, 0, 2).micro_batches.size(), 2u);
  const StepPlan fast = sampler.PlanStep(0, 16, {12, 4}, 0, 2);
  const StepPlan slow = sampler.PlanStep(0, 16, {12, 4}, 1, 2);
  EXPECT_EQ(fast.global_count, 4);
  EXPECT_EQ(fast.micro_batches[0].size() + fast.micro_batches[1].size(), 3u);
  EXPECT_EQ(slow.micro_batches[0].size(), 1u);
  EXPECT_TRUE(slow.micro_batches[1].empty());
}

TEST(PlanStepTest, BadArgumentsGiveAnEmptyPlan) {
  EpochSampler sampler(10, 0);
  EXPECT_TRUE(sampler.PlanStep(0, 0, {4, 4}, 2, 4).micro_batches.empty());
  EXPECT_TRUE(sampler.PlanStep(0, 0, {4, -1}, 0, 4).micro_batches.empty());
  EXPECT_TRUE(sampler.PlanStep(0, 0, {0, 0}, 0, 4).micro_batches.empty());
  EXPECT_TRUE(sampler.PlanStep(0, 0, {4, 4}, 0, 0).micro_batches.empty());
  EXPECT_TRUE(sampler.PlanStep(0, -1, {4, 4}, 0, 4).micro_batches.empty());
  EXPECT_EQ(sampler.PlanStep(0, 10, {4, 4}, 0, 4).global_count, 0);
}

}  // namespace
}  // namespace herd
