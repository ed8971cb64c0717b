// Keeps //bench:control_plane_bench working: a few simulated workers against
// a real herd-coordinator, one small rendezvous, seconds in all.
#include <gtest/gtest.h>
#include <unistd.h>

#include "bench/smoke_run.h"

namespace herd::bench {
namespace {

TEST(ControlPlaneBenchSmokeTest, HeartbeatsRendezvousAndMemoryAreReported) {
  nlohmann::json report =
      RunBenchmark("bench/control_plane_bench",
                   {"--workers=40", "--job-workers=8", "--warmup-seconds=1", "--duration-seconds=2",
                    "--after-seconds=0.5", "--client-threads=2", "--channels=2", "--register-threads=2"});
  ASSERT_TRUE(report.contains("heartbeat")) << report.dump();
  const nlohmann::json& heartbeat = report["heartbeat"];
  for (const char* key : {"sent", "per_second", "p50_ms", "p99_ms", "max_ms"})
    ExpectPositive(heartbeat, key, "heartbeat");
  EXPECT_EQ(heartbeat["failed"].get<int64_t>(), 0);
  EXPECT_GE(heartbeat["p99_ms"].get<double>(), heartbeat["p50_ms"].get<double>());

  const nlohmann::json& rendezvous = report["rendezvous"];
  for (const char* key : {"submit_ms", "all_joined_ms", "join_p50_ms", "join_p99_ms", "answers_parse_ms"}) {
    ExpectPositive(rendezvous, key, "rendezvous");
  }
  EXPECT_EQ(rendezvous["failed"].get<int>(), 0) << rendezvous["first_error"];
  EXPECT_TRUE(rendezvous["ranks_ok"].get<bool>()) << "the 8 members did not get ranks 0..7 of one generation";

  const nlohmann::json& coordinator = report["coordinator"];
  for (const char* key : {"rss_kib_started", "rss_kib_end", "peak_rss_kib"}) {
    ExpectPositive(coordinator, key, "coordinator");
  }
  EXPECT_EQ(coordinator["exit_code"].get<int>(), 0) << "herd-coordinator did not stop cleanly on SIGTERM";
  ExpectPositive(report["register"], "per_second", "register");
  EXPECT_TRUE(report["targets"]["heartbeat_met"].is_boolean());
  EXPECT_TRUE(report["targets"]["heartbeat_around_rendezvous_met"].is_boolean());
  EXPECT_TRUE(report["targets"]["rendezvous_met"].is_boolean());
  EXPECT_EQ(report["store"], "sqlite");
}

// The same on etcd: the coordinator keeps its state in a local etcd member.
TEST(ControlPlaneBenchSmokeTest, RunsOnEtcd) {
  if (access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "/usr/bin/etcd is missing (scripts/setup.sh installs it)";
  nlohmann::json report =
      RunBenchmark("bench/control_plane_bench",
                   {"--store=etcd", "--workers=40", "--job-workers=8", "--warmup-seconds=1", "--duration-seconds=2",
                    "--after-seconds=0.5", "--client-threads=2", "--channels=2", "--register-threads=2"});
  EXPECT_EQ(report["store"], "etcd");
  EXPECT_EQ(report["heartbeat"]["failed"].get<int64_t>(), 0);
  EXPECT_EQ(report["rendezvous"]["failed"].get<int>(), 0) << report["rendezvous"]["first_error"];
  EXPECT_TRUE(report["rendezvous"]["ranks_ok"].get<bool>());
  EXPECT_EQ(report["coordinator"]["exit_code"].get<int>(), 0) << "herd-coordinator did not stop cleanly on SIGTERM";
}

}  // namespace
}  // namespace herd::bench
