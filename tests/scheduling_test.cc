// Priorities end to end, with real processes on loopback: a low-priority job
// shrinks at a step boundary for a high-priority one, keeps training, and
// grows back when the high one ends, consuming every sample exactly once.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/harness/http_client.h"
#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

// Long enough (2000 steps on three workers) to still be training after
// it shrank, the high job ran and it grew back.
constexpr int64_t kLowSamples = 48000;

std::string LowJob() {
  return R"(
name: low
model: mlp
dataset: {kind: synthetic, synthetic_samples: 48000, synthetic_features: 64}
batch_size: 16
epochs: 2
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
log_interval_steps: 5
min_workers: 1
max_workers: 3
collective_timeout_seconds: 10
seed: 5
)";
}

std::string HighJob() {
  return R"(
name: high
model: mlp
dataset: {kind: synthetic, synthetic_samples: 4096, synthetic_features: 64}
batch_size: 16
max_steps: 300
log_interval_steps: 5
min_workers: 2
max_workers: 2
seed: 6
)";
}

TEST(Scheduling, LowPriorityJobShrinksForAHighOneAndGrowsBackExactlyOnce) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 3;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  const std::string low = cluster.Submit(LowJob());
  auto job = WaitForJob(
      cluster, low, [](const auto& j) { return Field(j, "world_size") == 3 && Field(j, "step") >= 20; }, seconds(120));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  const int64_t low_generation = Field(job, "generation");

  // High priority, needing 2 of the 3 busy workers: low gives its two
  // highest ranks at its next step boundary and goes on alone.
  std::ofstream(cluster.root() + "/high.yaml") << HighJob();
  const CommandResult submitted = cluster.Herd({"submit", cluster.root() + "/high.yaml", "--priority", "10"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string high = submitted.out.substr(0, submitted.out.find('\n'));
  auto high_job = WaitForJob(
      cluster, high, [](const auto& j) { return j.value("state", "") != "PENDING"; }, seconds(120));
  ASSERT_EQ(high_job.value("state", ""), "RUNNING") << high_job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(high_job, "world_size"), 2);
  EXPECT_EQ(high_job["spec"].value("priority", 0), 10);
  job = cluster.HerdJson({"status", low});
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  ASSERT_EQ(Field(job, "world_size"), 1) << job.dump(2);
  EXPECT_EQ(job["workers"][0], cluster.worker_id(0)) << "rank 0 stays: " << job.dump(2);
  EXPECT_GT(Field(job, "generation"), low_generation);

  // The low job keeps training on one worker while the high one runs.
  const int64_t step_alone = Field(job, "step");
  job = WaitForJob(
      cluster, low,
      [&](const auto& j) { return j.value("state", "") != "RUNNING" || Field(j, "step") >= step_alone + 10; },
      seconds(120));
  EXPECT_GE(Field(job, "step"), step_alone + 10) << job.dump(2) << cluster.Logs();

  high_job = cluster.WaitForState(high, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(high_job.value("state", ""), "SUCCEEDED") << high_job.dump(2) << cluster.Logs();

  // Back to three workers once the high one is done.
  job = WaitForJob(
      cluster, low, [](const auto& j) { return j.value("state", "") != "RUNNING" || Field(j, "world_size") == 3; },
      seconds(120));
  ASSERT_EQ(Field(job, "world_size"), 3) << "low did not grow back: " << job.dump(2) << cluster.Logs();
  job = cluster.WaitForState(low, {"SUCCEEDED", "FAILED"}, seconds(600));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();

  const LedgerReplay replay = ExpectEachSampleOnce(ledger_dir, 2, kLowSamples, low);
  std::cerr << "low trained " << replay.generation_start_step.size() << " generations, "
            << replay.rolled_back_records << " step records rolled back\n";
  EXPECT_GE(replay.generation_start_step.size(), 3u);  // start, shrunk, grown back
  // Shrinking re-runs no step (drain_test holds the release path to zero).
  // Growing back is a join generation, which fences the running one at once:
  // the steps since its last commit, at most log_interval_steps (5) on its
  // single rank, are re-run; never a committed one (the ledger above).
  EXPECT_LE(replay.rolled_back_records, 5);

  auto metrics = HttpGet(cluster.coordinator_metrics_address(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_NE(metrics->body.find("herd_coordinator_preemptions_total{kind=\"shrink\"} 1"), std::string::npos)
      << metrics->body;
}

}  // namespace
}  // namespace herd::testing
