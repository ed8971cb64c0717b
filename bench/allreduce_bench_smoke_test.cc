// Keeps //bench:allreduce_bench working: a tiny run that must finish and
// report sane figures. 4 MiB + 4 bytes takes herd's striped path with an odd
// element count; 3 ranks take the ring past its two-rank special case.
#include <gtest/gtest.h>

#include "bench/smoke_run.h"

namespace herd::bench {
namespace {

TEST(AllreduceBenchSmokeTest, ReportsPositiveFiguresAndCorrectSums) {
  nlohmann::json report = RunBenchmark("bench/allreduce_bench",
                                       {"--ranks=2,3", "--sizes=4096,4194308", "--iterations=2", "--min-iterations=2",
                                        "--warmup=1", "--max-batch=2", "--timeout-seconds=120"});
  ASSERT_TRUE(report.contains("worlds")) << report.dump();
  ASSERT_EQ(report["worlds"].size(), 2u);
  for (const nlohmann::json& world : report["worlds"]) {
    ASSERT_EQ(world["sizes"].size(), 2u) << world.dump();
    for (const nlohmann::json& size : world["sizes"]) {
      const std::string where = "ranks " + world["ranks"].dump() + ", " + size["bytes"].dump() + " bytes";
      for (const char* variant : {"tcp_pump", "herd", "gloo_ring", "gloo_ring_chunked", "herd_shm"}) {
        ASSERT_TRUE(size.contains(variant)) << where << ": no " << variant;
        const nlohmann::json& figures = size[variant];
        ExpectPositive(figures, "us", where + " " + variant);
        ExpectPositive(figures, "busbw_gbps", where + " " + variant);
        ExpectPositive(figures, "cpu_ms", where + " " + variant);
        EXPECT_TRUE(figures["correct"].get<bool>()) << where << " " << variant << " summed wrong";
      }
    }
  }
  ASSERT_EQ(report["headline"].size(), 2u);
  for (const char* key : {"herd_busbw_gbps", "gloo_busbw_gbps", "pump_gbps", "herd_over_pump", "herd_over_gloo"}) {
    ExpectPositive(report["headline"][0], key, "headline");
  }
  EXPECT_TRUE(report["targets"]["pump_met"].is_boolean());
  EXPECT_TRUE(report["targets"]["gloo_met"].is_boolean());
}

}  // namespace
}  // namespace herd::bench
