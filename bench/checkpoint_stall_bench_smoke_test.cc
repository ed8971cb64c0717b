// Keeps //bench:checkpoint_stall_bench working: a tiny mlp saved both ways,
// the writer's last checkpoint verified on disk.
#include <gtest/gtest.h>

#include "bench/smoke_run.h"

namespace herd::bench {
namespace {

TEST(CheckpointStallBenchSmokeTest, BothWaysWriteAndTheWritersCheckpointVerifies) {
  nlohmann::json report = RunBenchmark("bench/checkpoint_stall_bench",
                                       {"--hidden=64,64", "--features=32", "--saves=2", "--optimizer=adamw"});
  ASSERT_TRUE(report.contains("verified")) << report.dump();
  EXPECT_TRUE(report["verified"].get<bool>()) << report.dump();
  EXPECT_EQ(report["saves"].get<int>(), 2);
  for (const char* key : {"state_bytes", "sync_write_seconds", "stall_seconds", "background_write_seconds"}) {
    ExpectPositive(report, key, "checkpoint_stall_bench");
  }
}

}  // namespace
}  // namespace herd::bench
