#include "worker/train/sampler.h"

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

}  // namespace
}  // namespace herd
