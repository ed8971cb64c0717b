// Keeps //bench:optimizer_shard_bench working: a tiny run whose shards must
// add up to the whole optimizer state, each rank holding part of it.
#include <gtest/gtest.h>

#include "bench/smoke_run.h"

namespace herd::bench {
namespace {

TEST(OptimizerShardBenchSmokeTest, ShardsAddUpToTheWholeState) {
  nlohmann::json report = RunBenchmark("bench/optimizer_shard_bench",
                                       {"--ranks=1,2", "--model=resnet_small", "--steps=1"});
  ASSERT_TRUE(report.contains("worlds")) << report.dump();
  ASSERT_EQ(report["worlds"].size(), 2u);
  for (const nlohmann::json& world : report["worlds"]) {
    const int w = world["world"].get<int>();
    ASSERT_EQ(world["ranks"].size(), static_cast<size_t>(w)) << world.dump();
    int64_t sum = 0;
    for (const nlohmann::json& rank : world["ranks"]) {
      const std::string where = "W=" + std::to_string(w) + " rank " + rank["rank"].dump();
      ExpectPositive(rank, "state_bytes_sharded", where);
      if (w > 1) {
        EXPECT_LT(rank["ratio"].get<double>(), 0.75) << where;
      }
      sum += rank["state_bytes_sharded"].get<int64_t>();
    }
    EXPECT_EQ(sum, world["ranks"][0]["state_bytes_unsharded"].get<int64_t>()) << world.dump();
  }
}

// mnist_cnn's fully connected weight is 98% of its state: ranges cut it, so
// each of two ranks holds half (whole-tensor sharding left 0.983 on one).
TEST(OptimizerShardBenchSmokeTest, OneDominantTensorIsSplitInHalves) {
  nlohmann::json report = RunBenchmark(
      "bench/optimizer_shard_bench", {"--ranks=2", "--model=mnist_cnn", "--sample-shape=1,28,28", "--steps=1",
                                      "--commits=1"});
  ASSERT_TRUE(report.contains("worlds")) << report.dump();
  ASSERT_EQ(report["worlds"].size(), 1u);
  ASSERT_EQ(report["worlds"][0]["ranks"].size(), 2u) << report.dump();
  for (const nlohmann::json& rank : report["worlds"][0]["ranks"]) {
    EXPECT_NEAR(rank["ratio"].get<double>(), 0.5, 1e-3) << rank.dump();
  }
}

}  // namespace
}  // namespace herd::bench
