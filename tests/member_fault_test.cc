// A dead member never holds a job, with real processes on loopback: the
// survivors' failure reports name it, and the coordinator leaves it out of
// the next generation at once. A dead worker (SIGKILL) costs one
// generation, not a wait for its heartbeat silence. A hung one:
// hung_member_test.
#include <gtest/gtest.h>
#include <signal.h>

#include <tuple>
#include <vector>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/process.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

constexpr char kJob[] = R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 400000, synthetic_features: 32}
batch_size: 8
epochs: 1
log_interval_steps: 5
min_workers: 2
max_workers: 3
restart_budget: 10
collective_timeout_seconds: 5
)";

std::string Workers(const nlohmann::json& job) {
  std::string ids;
  for (const auto& id : job.value("workers", nlohmann::json::array())) ids += id.get<std::string>() + " ";
  return ids;
}

TEST(MemberFault, KilledWorkerIsLeftOutOfTheVeryNextGeneration) {
  ClusterOptions options;
  options.workers = 3;
  options.lease_seconds = 10;  // its silence alone would take seconds to show
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(kJob);
  auto job = WaitForJob(
      cluster, id, [](const auto& j) { return Field(j, "world_size") == 3 && Field(j, "step") >= 20; }, seconds(120));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  const int64_t generation = Field(job, "generation");

  SignalWorker(cluster, 2, SIGKILL);
  double resumed_after = 0;
  std::tie(job, resumed_after) = WaitForProgressOn(cluster, id, 2, Field(job, "step"), seconds(60));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  ASSERT_EQ(Field(job, "world_size"), 2) << job.dump(2) << cluster.Logs();
  std::cerr << "trained on 2 workers " << resumed_after << " s after the kill\n";
  // The survivors' report named the dead rank: one generation, without it.
  // Waiting for its silence would have formed one with it first.
  EXPECT_EQ(Field(job, "generation"), generation + 1) << job.dump(2);
  EXPECT_EQ(Workers(job).find(cluster.worker_id(2)), std::string::npos) << job.dump(2);
  EXPECT_LT(resumed_after, options.lease_seconds) << "the survivors waited for the dead worker's lease";
  cluster.Herd({"cancel", id});
}

}  // namespace
}  // namespace herd::testing
