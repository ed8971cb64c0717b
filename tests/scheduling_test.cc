// Priorities end to end, with real processes on loopback: a low-priority job
// shrinks at a step boundary for a high-priority one, keeps training, and
// grows back at a step boundary when the high one ends, consuming every
// sample exactly once and re-computing none; a preemptible job at its
// minimum is suspended whole and resumes exactly where it stopped.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/harness/final_model.h"
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
  // Both re-forms happen at a step boundary every rank committed.
  EXPECT_EQ(replay.rolled_back_records, 0) << "steps were re-computed";
  EXPECT_NE(ReadFile(cluster.job_dir(0, low) + "/trainer.log").find("re-forms after step"), std::string::npos)
      << "growing back did not wait for a step boundary";

  auto metrics = HttpGet(cluster.coordinator_metrics_address(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_NE(metrics->body.find("herd_coordinator_preemptions_total{kind=\"shrink\"} 1"), std::string::npos)
      << metrics->body;
}

// Preemptible, at its minimum (2 of 2), and no checkpoint interval: only
// the checkpoint of the suspension's boundary can carry its steps over.
std::string PreemptibleJob() {
  return R"(
name: batch
model: mlp
dataset: {kind: synthetic, synthetic_samples: 48000, synthetic_features: 64}
batch_size: 16
epochs: 1
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
log_interval_steps: 5
checkpoint: {interval_steps: 100000}
min_workers: 2
max_workers: 2
preemptible: true
restart_budget: 0
seed: 11
)";
}

// The same job run through a suspension ends bitwise where it ends run
// without one: same seed and sampler order, the boundary's checkpoint holds
// the step, optimizer state and position, and a 2-rank sum does not depend
// on arrival order (as FaultTolerance.CheckpointResumeIsExact).
TEST(Scheduling, PreemptibleJobAtItsMinimumIsSuspendedAndResumesExactly) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 2;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  const std::string uninterrupted = cluster.Submit(PreemptibleJob());
  auto job = cluster.WaitForState(uninterrupted, {"SUCCEEDED", "FAILED"}, seconds(600));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();

  const std::string suspended = cluster.Submit(PreemptibleJob());
  job = WaitForJob(cluster, suspended, [](const auto& j) { return Field(j, "step") >= 30; }, seconds(120));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  std::ofstream(cluster.root() + "/high.yaml") << HighJob();
  const CommandResult submitted = cluster.Herd({"submit", cluster.root() + "/high.yaml", "--priority", "10"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string high = submitted.out.substr(0, submitted.out.find('\n'));

  // Shrinking cannot free 2 workers from a job at its minimum: it is
  // suspended, back to PENDING, and the high job runs on both workers.
  job = WaitForJob(cluster, suspended, [](const auto& j) { return j.value("state", "") != "RUNNING"; }, seconds(120));
  ASSERT_EQ(job.value("state", ""), "PENDING") << job.dump(2) << cluster.Logs();
  const int64_t boundary = Field(job, "step");
  EXPECT_NE(job.value("reason", "").find("suspended at step " + std::to_string(boundary)), std::string::npos)
      << job.dump(2);
  const auto catalog = cluster.HerdJson({"checkpoints", suspended});
  ASSERT_EQ(catalog["checkpoints"].size(), 1u) << catalog.dump(2);
  EXPECT_EQ(Field(catalog["checkpoints"][0], "step"), boundary) << catalog.dump(2);
  auto high_job = WaitForJob(
      cluster, high, [](const auto& j) { return j.value("state", "") != "PENDING"; }, seconds(120));
  EXPECT_EQ(Field(high_job, "world_size"), 2) << high_job.dump(2);
  high_job = cluster.WaitForState(high, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(high_job.value("state", ""), "SUCCEEDED") << high_job.dump(2) << cluster.Logs();

  // It resumes by itself once the workers are free, from that boundary.
  job = cluster.WaitForState(suspended, {"SUCCEEDED", "FAILED"}, seconds(600));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  const std::string log = ReadFile(cluster.job_dir(0, suspended) + "/trainer.log");
  EXPECT_NE(log.find("every rank left the job after committing step " + std::to_string(boundary)), std::string::npos)
      << log;
  EXPECT_NE(log.find("resumed from checkpoint"), std::string::npos) << log;

  const LedgerReplay replay = ExpectEachSampleOnce(ledger_dir, 1, 48000, suspended);
  EXPECT_EQ(replay.rolled_back_records, 0) << "steps were re-computed";
  ASSERT_EQ(replay.generation_start_step.size(), 2u) << "before and after the suspension";
  EXPECT_EQ(replay.generation_start_step.rbegin()->second, boundary);
  for (int worker : {0, 1}) {
    auto differing = DifferingTensors(LoadFinalModel(cluster.job_dir(worker, uninterrupted)),
                                      LoadFinalModel(cluster.job_dir(worker, suspended)));
    EXPECT_TRUE(differing.empty()) << "worker " << worker << ": " << differing.size() << " tensors differ, first "
                                   << differing.front();
  }

  auto metrics = HttpGet(cluster.coordinator_metrics_address(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_NE(metrics->body.find("herd_coordinator_preemptions_total{kind=\"suspend\"} 1"), std::string::npos)
      << metrics->body;
}

}  // namespace
}  // namespace herd::testing
