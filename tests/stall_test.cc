// Stalls must cost no committed step, with real processes on loopback: the
// coordinator stopped (SIGSTOP) for three leases, and a worker daemon stopped
// for two leases while its trainer runs on, then re-admitted with the job
// context its trainer kept.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <regex>
#include <thread>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "worker/train/batches/sample_ledger.h"

namespace herd::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

constexpr int64_t kSamples = 24000;

std::string JobSpec(int64_t min_workers, int64_t max_workers) {
  return "model: mlp\n"
         "dataset: {kind: synthetic, synthetic_samples: 24000, synthetic_features: 64}\n"
         "batch_size: 16\n"
         "epochs: 2\n"
         "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
         "log_interval_steps: 5\n"
         "collective_timeout_seconds: 5\n"
         "seed: 5\n"
         "min_workers: " + std::to_string(min_workers) + "\nmax_workers: " + std::to_string(max_workers) + "\n";
}

// The newest "step N/M" line rank 0's trainer logged, or -1.
int64_t LastLoggedStep(const std::string& log) {
  static const std::regex kStep(R"(\] step (\d+)/)");
  int64_t last = -1;
  for (std::sregex_iterator it(log.begin(), log.end(), kStep), end; it != end; ++it) last = std::stoll((*it)[1]);
  return last;
}

// Polls the job until it ends, failing the test if its committed step ever
// moves backwards.
nlohmann::json WatchStepNeverGoesBack(LocalCluster& cluster, const std::string& id, int64_t floor) {
  int64_t highest = floor;
  return WaitForJob(
      cluster, id,
      [&](const nlohmann::json& job) {
        const int64_t step = Field(job, "step");
        EXPECT_GE(step, highest) << "a committed step was lost: " << job.dump(2);
        highest = std::max(highest, step);
        return job.value("state", "") != "RUNNING";
      },
      seconds(300));
}

// The coordinator hangs for three leases mid-training. Training goes on
// meanwhile (reports leave the step loop), nobody's lease is charged for the
// coordinator's own pause, the generation stays, and the job loses no step.
TEST(Stalls, CoordinatorStoppedForThreeLeasesCostsNothing) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 2;
  options.lease_seconds = 3;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(JobSpec(2, 2));
  auto job = WaitForJob(cluster, id, [](const auto& j) { return Field(j, "step") >= 40; }, seconds(120));
  ASSERT_GE(Field(job, "step"), 40) << job.dump(2) << cluster.Logs();
  const int64_t generation = Field(job, "generation");
  const std::string rank0_log = cluster.job_dir(0, id) + "/trainer.log";

  cluster.coordinator().Signal(SIGSTOP);
  const int64_t logged_at_stop = LastLoggedStep(ReadFile(rank0_log));
  // Stopped for three leases at least, and until rank 0 logged four more
  // intervals (a slow machine takes longer for them; the bound is for a
  // stalled job only).
  const auto stopped_at = std::chrono::steady_clock::now();
  int64_t logged_at_resume = logged_at_stop;
  while (std::chrono::steady_clock::now() < stopped_at + seconds(120)) {
    logged_at_resume = LastLoggedStep(ReadFile(rank0_log));
    if (std::chrono::steady_clock::now() >= stopped_at + seconds(3 * 3) && logged_at_resume > logged_at_stop + 4 * 5) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  cluster.coordinator().Signal(SIGCONT);
  // Steps kept coming while nobody answered the reports (a report waited on
  // in the step loop would allow one interval per RPC timeout).
  EXPECT_GT(logged_at_resume, logged_at_stop + 4 * 5) << "training stalled with the coordinator";

  job = WatchStepNeverGoesBack(cluster, id, Field(job, "step"));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "generation"), generation) << "the coordinator's pause re-formed the job: " << job.dump(2);
  EXPECT_EQ(Field(job, "step"), Field(job, "total_steps"));
  const std::string coordinator_log = ReadFile(cluster.root() + "/coordinator.log");
  EXPECT_NE(coordinator_log.find("every worker's lease restarts now"), std::string::npos) << coordinator_log;
  ExpectEachSampleOnce(ledger_dir, 2, kSamples);
}

// A worker daemon hangs for two leases while its trainer runs on: the job
// re-forms without it, then re-admits it when it returns, and its trainer
// (the same process, no reload) heals into the job. No committed step is lost.
TEST(Stalls, WorkerDaemonStoppedForTwoLeasesIsReadmittedWithItsTrainer) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 3;
  options.lease_seconds = 3;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(JobSpec(2, 3));
  auto job = WaitForJob(cluster, id, [](const auto& j) { return Field(j, "step") >= 40; }, seconds(120));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  const std::vector<pid_t> trainer = TrainerPids(cluster, 2);
  ASSERT_EQ(trainer.size(), 1u);
  const int64_t first_generation = Field(job, "generation");

  cluster.worker(2).Signal(SIGSTOP);  // the daemon only: its trainer trains on
  job = WaitForJob(
      cluster, id,
      [&](const auto& j) { return j.value("state", "") != "RUNNING" || Field(j, "generation") > first_generation; },
      seconds(60));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  const int64_t without = Field(job, "generation");
  // The survivors' trainers stay stopped until they are asked to re-form
  // for the returning worker, so the job cannot end on two workers first.
  const bool reform_asked = HoldTrainersUntilReformAsked(
      cluster, id, {0, 1}, without,
      [&] {
        std::this_thread::sleep_for(seconds(3));  // two leases in all since the stop
        cluster.worker(2).Signal(SIGCONT);
        return true;
      },
      seconds(60));
  ASSERT_TRUE(reform_asked) << "no re-form was asked for the returning worker: " << cluster.Logs();

  // Re-admitted: a later generation with all three members again.
  job = WaitForJob(
      cluster, id,
      [&](const auto& j) {
        return j.value("state", "") != "RUNNING" || (Field(j, "generation") > without && Field(j, "world_size") == 3);
      },
      seconds(60));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  EXPECT_EQ(TrainerPids(cluster, 2), trainer) << "the left-out worker's trainer was restarted";

  job = WatchStepNeverGoesBack(cluster, id, Field(job, "step"));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  const std::string log = ReadFile(cluster.job_dir(2, id) + "/trainer.log");
  EXPECT_EQ(Count(log, "job context loaded"), 1) << log;
  EXPECT_NE(log.find("healed from rank"), std::string::npos) << log;
  ExpectEachSampleOnce(ledger_dir, 2, kSamples);
}

}  // namespace
}  // namespace herd::testing
