// Worker labels end to end, with real processes on loopback: herd-worker
// --label registers them, `herd workers` and both services' metrics show
// them, a job with placement.require runs only on the labelled worker, and
// a job no registered worker can run stays PENDING saying which labels it
// waits for.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "tests/harness/http_client.h"
#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

std::string JobRequiring(const std::string& name, const std::string& require) {
  return R"(
name: )" + name + R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 2048, synthetic_features: 16}
batch_size: 16
max_steps: 40
log_interval_steps: 5
min_workers: 1
max_workers: 2
placement: {require: )" + require + R"(}
seed: 3
)";
}

class PlacementTest : public ::testing::Test {
 protected:
  static ClusterOptions Options() {
    ClusterOptions options;
    options.workers = 2;
    // worker-0 is the only a100; worker-1 carries another pool.
    options.worker_args = {{"--label", "pool=a100", "--label", "site=us-east"}, {"--label=pool=t4"}};
    return options;
  }
  LocalCluster cluster_{Options()};
};

TEST_F(PlacementTest, WorkersShowTheirLabels) {
  const nlohmann::json workers = cluster_.HerdJson({"workers"});
  std::map<std::string, nlohmann::json> by_id;
  for (const auto& worker : workers["workers"]) by_id[worker.value("id", "")] = worker.value("labels", nlohmann::json());
  EXPECT_EQ(by_id[cluster_.worker_id(0)], (nlohmann::json{{"pool", "a100"}, {"site", "us-east"}})) << workers.dump(2);
  EXPECT_EQ(by_id[cluster_.worker_id(1)], (nlohmann::json{{"pool", "t4"}})) << workers.dump(2);

  const CommandResult table = cluster_.Herd({"workers"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("LABELS"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("pool=a100,site=us-east"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("pool=t4"), std::string::npos) << table.out;

  // The coordinator publishes its gauges at each upkeep tick: wait for the
  // first one after both registrations, bounded by the lease.
  const std::string first = "herd_coordinator_worker_labels{label_pool=\"a100\",label_site=\"us-east\",worker=\"" +
                            cluster_.worker_id(0) + "\"} 1";
  const std::string second =
      "herd_coordinator_worker_labels{label_pool=\"t4\",worker=\"" + cluster_.worker_id(1) + "\"} 1";
  std::string body;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto metrics = HttpGet(cluster_.coordinator_metrics_address(), "/metrics");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    body = metrics->body;
    if (body.find(first) != std::string::npos && body.find(second) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(body.find(first), std::string::npos) << body;
  EXPECT_NE(body.find(second), std::string::npos) << body;

  const auto ready = nlohmann::json::parse(ReadFile(cluster_.root() + "/" + cluster_.worker_id(0) + ".json"));
  auto worker_metrics = HttpGet(ready["metrics"].get<std::string>(), "/metrics");
  ASSERT_TRUE(worker_metrics.ok()) << worker_metrics.status();
  EXPECT_NE(worker_metrics->body.find("herd_worker_info{device=\"cpu\",label_pool=\"a100\",label_site=\"us-east\","
                                      "worker=\"" + cluster_.worker_id(0) + "\"} 1"),
            std::string::npos)
      << worker_metrics->body;
}

TEST_F(PlacementTest, RequiredLabelsPickTheWorkerAndNobodyFittingLeavesTheJobPending) {
  // max_workers 2 with two idle workers: only the a100 one may take it.
  const std::string a100 = cluster_.Submit(JobRequiring("a100-job", "{pool: a100}"));
  nlohmann::json job = cluster_.WaitForState(a100, {"SUCCEEDED", "FAILED"}, seconds(180));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster_.Logs();
  EXPECT_EQ(job["workers"], nlohmann::json::array({cluster_.worker_id(0)})) << job.dump(2);
  EXPECT_EQ(Field(job, "world_size"), 1) << job.dump(2);
  EXPECT_EQ(Field(job, "generation"), 1) << "it never grew onto the t4 worker: " << job.dump(2);

  // Nobody is an h100: it waits, naming what it waits for, and takes no worker.
  const std::string h100 = cluster_.Submit(JobRequiring("h100-job", "{pool: h100}"));
  const std::string expected = "waiting for workers with placement.require pool=h100: 0 registered fit, need 1";
  job = WaitForJob(
      cluster_, h100, [&](const auto& j) { return j.value("reason", "") == expected; }, seconds(30));
  EXPECT_EQ(job.value("state", ""), "PENDING") << job.dump(2);
  EXPECT_EQ(job.value("reason", ""), expected) << job.dump(2);
  for (const auto& worker : cluster_.HerdJson({"workers"})["workers"]) {
    EXPECT_EQ(worker.value("state", ""), "IDLE") << worker.dump(2);
  }
  const CommandResult cancelled = cluster_.Herd({"cancel", h100});
  EXPECT_EQ(cancelled.exit_code, 0) << cancelled.err;
}

TEST(PlacementFlags, BadLabelFailsTheWorkerStartNamingIt) {
  const std::string dir = ::testing::TempDir() + "/bad_label";
  const CommandResult result = RunCommand({LocalCluster::Binary("worker/daemon/herd-worker"), "--insecure-no-auth",
                                           "--work-dir=" + dir,
                                           "--trainer-binary=" + LocalCluster::Binary("worker/train/herd-trainer"),
                                           "--label", "site=us east"},
                                          seconds(30));
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_NE(result.err.find("herd-worker: --label 'site=us east': value 'us east' of label 'site' may only contain"),
            std::string::npos)
      << result.err;
}

}  // namespace
}  // namespace herd::testing
