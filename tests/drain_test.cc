// Leaving a job at a step boundary, end to end with real processes: `herd
// drain WORKER` and SIGTERM to a worker daemon make that worker's trainer
// commit the current step with its peers and leave; the job re-forms
// without it from that commit. Nothing is lost and nothing is trained twice
// (the sample ledger shows every sample exactly once and no step re-run),
// no restart budget is spent (the jobs have none), and a SIGTERMed daemon
// exits 0 once its trainer left.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "worker/train/batches/sample_ledger.h"

namespace herd::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

constexpr int64_t kSamples = 24000;

// restart_budget 0: a release that cost a restart would fail the job.
std::string JobYaml() {
  return R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 24000, synthetic_features: 64}
batch_size: 16
epochs: 2
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
log_interval_steps: 5
min_workers: 2
max_workers: 3
restart_budget: 0
collective_timeout_seconds: 10
seed: 5
)";
}

struct DrainRun {
  std::string ledger_dir;
  std::string job_id;
  int64_t first_generation = 0;
};

// Three workers train the job until step 40.
DrainRun StartJob(LocalCluster& cluster, const std::string& ledger_dir) {
  DrainRun run;
  run.ledger_dir = ledger_dir;
  run.job_id = cluster.Submit(JobYaml());
  auto job = WaitForJob(cluster, run.job_id, [](const auto& j) { return Field(j, "step") >= 40; }, seconds(120));
  EXPECT_GE(Field(job, "step"), 40) << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "world_size"), 3) << job.dump(2);
  run.first_generation = Field(job, "generation");
  return run;
}

// The job re-formed on workers 0 and 1 and then finished; what the ledger
// and logs say about the boundary.
void ExpectLeftAtABoundaryLosingNothing(LocalCluster& cluster, const DrainRun& run, double notice_to_reformed) {
  auto job = cluster.WaitForState(run.job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  std::cerr << "re-formed without the drained worker " << notice_to_reformed << " s after the notice\n";

  // The leaver said where it left; the survivors re-formed from that commit.
  const std::string leaver_log = ReadFile(cluster.job_dir(2, run.job_id) + "/trainer.log");
  ASSERT_NE(leaver_log.find("released: left the job after committing step"), std::string::npos) << leaver_log;
  for (int survivor : {0, 1}) {
    const std::string log = ReadFile(cluster.job_dir(survivor, run.job_id) + "/trainer.log");
    EXPECT_NE(log.find("left the job after step"), std::string::npos) << log;
    EXPECT_EQ(log.find("failed at rank"), std::string::npos) << "a release is no failure: " << log;
    EXPECT_NE(log.find("healed from its own commit"), std::string::npos) << log;
  }

  // Every sample of both epochs exactly once, no step trained twice: the
  // next generation started right where the leaver's last one ended.
  const LedgerReplay replay = ExpectEachSampleOnce(run.ledger_dir, 2, kSamples);
  EXPECT_EQ(replay.rolled_back_records, 0) << "steps were re-computed";
  ASSERT_EQ(replay.generation_start_step.size(), 2u) << "one generation before the drain, one after";
  const int64_t boundary = replay.generation_start_step.rbegin()->second;
  EXPECT_GT(boundary, 40);
  std::cerr << "left at step " << boundary << "; steps lost 0, re-computed " << replay.rolled_back_records << "\n";
}

// How long until the job runs on two workers in a newer generation.
double WaitForReformed(LocalCluster& cluster, const DrainRun& run, Clock::time_point notice) {
  auto job = WaitForJob(
      cluster, run.job_id,
      [&](const auto& j) {
        return j.value("state", "") != "RUNNING" ||
               (Field(j, "world_size") == 2 && Field(j, "generation") > run.first_generation);
      },
      seconds(60));
  const double seconds_taken = std::chrono::duration<double>(Clock::now() - notice).count();
  EXPECT_EQ(Field(job, "world_size"), 2) << job.dump(2) << cluster.Logs();
  EXPECT_EQ(job.value("state", ""), "RUNNING") << "the job ended before the drain: " << job.dump(2);
  return seconds_taken;
}

nlohmann::json WorkerInfo(LocalCluster& cluster, const std::string& id) {
  const nlohmann::json workers = cluster.HerdJson({"workers"});
  for (const auto& worker : workers["workers"]) {
    if (worker.value("id", "") == id) return worker;
  }
  return nlohmann::json::object();
}

TEST(Drain, HerdDrainReleasesTheWorkerAtAStepBoundaryAndCordonsIt) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 3;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  const DrainRun run = StartJob(cluster, ledger_dir);

  // Users may not drain; admins may.
  CommandResult refused = cluster.Herd({"drain", "worker-2"});
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("admin"), std::string::npos) << refused.err;
  EXPECT_EQ(cluster.HerdAs(cluster.credentials().admin_token_file, {"drain", "nobody"}).exit_code, 1);

  // --wait returns once the worker left its job, like kubectl drain.
  const auto notice = Clock::now();
  CommandResult drained =
      cluster.HerdAs(cluster.credentials().admin_token_file, {"drain", "worker-2", "--wait", "-o", "json"});
  ASSERT_EQ(drained.exit_code, 0) << drained.err;
  auto response = nlohmann::json::parse(drained.out);
  EXPECT_EQ(response["released_jobs"], nlohmann::json::array({run.job_id})) << drained.out;
  EXPECT_TRUE(response["worker"].value("cordoned", false)) << drained.out;
  EXPECT_EQ(response["worker"].value("state", ""), "IDLE") << drained.out;
  EXPECT_NE(drained.err.find("waiting for worker-2 to leave job " + run.job_id), std::string::npos) << drained.err;
  const auto after_wait = cluster.HerdJson({"status", run.job_id});
  EXPECT_EQ(after_wait["workers"].size(), 2u) << "--wait returned before the job let the worker go: "
                                               << after_wait.dump(2);

  const double reformed = WaitForReformed(cluster, run, notice);
  ExpectLeftAtABoundaryLosingNothing(cluster, run, reformed);

  // The daemon stays, cordoned and idle; uncordon makes it schedulable.
  auto worker = WorkerInfo(cluster, "worker-2");
  EXPECT_EQ(worker.value("state", ""), "IDLE") << worker.dump(2);
  EXPECT_TRUE(worker.value("cordoned", false)) << worker.dump(2);
  CommandResult table = cluster.Herd({"workers"});
  EXPECT_NE(table.out.find("IDLE,CORDONED"), std::string::npos) << table.out;
  ASSERT_EQ(cluster.HerdAs(cluster.credentials().admin_token_file, {"uncordon", "worker-2"}).exit_code, 0);
  EXPECT_FALSE(WorkerInfo(cluster, "worker-2").value("cordoned", false));
}

TEST(Drain, SigtermDrainsTheDaemonWhichExitsZeroOnceItsTrainerLeft) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 3;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  const DrainRun run = StartJob(cluster, ledger_dir);

  // The notice a pod's preStop hook or a spot interruption gives: SIGTERM
  // to the daemon alone (its trainer is told by the daemon, not the signal).
  const auto notice = Clock::now();
  cluster.worker(2).Signal(SIGTERM);
  const double reformed = WaitForReformed(cluster, run, notice);
  // Well inside the default --drain-timeout-seconds (50) and the chart's grace.
  const auto exit_code = cluster.worker(2).Wait(seconds(45));
  const double exited_after = std::chrono::duration<double>(Clock::now() - notice).count();
  ASSERT_TRUE(exit_code.has_value()) << "the drained daemon did not exit" << cluster.Logs();
  EXPECT_EQ(*exit_code, 0) << cluster.Logs();
  std::cerr << "the drained daemon exited " << exited_after << " s after SIGTERM\n";
  ExpectLeftAtABoundaryLosingNothing(cluster, run, reformed);
}

// Draining the only worker of a job: nobody is left to hold the commit in
// memory, so rank 0 checkpoints the boundary and has it recorded before it
// leaves, and the job goes back to PENDING and resumes on another worker
// from exactly that step.
TEST(Drain, DrainingEveryWorkerOfAJobResumesItFromTheBoundaryCheckpoint) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 2;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  // No interval checkpoint: only the boundary's can carry the step over.
  const std::string id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 24000, synthetic_features: 64}
batch_size: 16
epochs: 1
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
log_interval_steps: 5
checkpoint: {interval_steps: 100000}
min_workers: 1
max_workers: 1
restart_budget: 0
seed: 5
)");
  auto job = WaitForJob(cluster, id, [](const auto& j) { return Field(j, "step") >= 40; }, seconds(120));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  const std::string first = job["workers"][0];
  const int index = first == cluster.worker_id(0) ? 0 : 1;
  const int other = 1 - index;

  ASSERT_EQ(cluster.HerdAs(cluster.credentials().admin_token_file, {"drain", first}).exit_code, 0);
  // It waits PENDING (nobody holds the boundary in memory), then is
  // scheduled on the other worker.
  job = WaitForJob(
      cluster, id,
      [&](const auto& j) {
        const std::string state = j.value("state", "");
        return (state != "RUNNING" && state != "PENDING") ||
               (state == "RUNNING" && j["workers"].size() == 1 && j["workers"][0] == cluster.worker_id(other));
      },
      seconds(60));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << "the job ended before the drain: " << job.dump(2);
  job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED", "CANCELLED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();

  const std::string leaver_log = ReadFile(cluster.job_dir(index, id) + "/trainer.log");
  ASSERT_NE(leaver_log.find("every rank left the job after committing step"), std::string::npos) << leaver_log;
  const LedgerReplay replay = ExpectEachSampleOnce(ledger_dir, 1, 24000, id);
  EXPECT_EQ(replay.rolled_back_records, 0) << "steps were re-computed";
  ASSERT_EQ(replay.generation_start_step.size(), 2u) << "one generation before the drain, one after";
  const int64_t boundary = replay.generation_start_step.rbegin()->second;
  EXPECT_GT(boundary, 40);
  const std::string resumed_log = ReadFile(cluster.job_dir(other, id) + "/trainer.log");
  EXPECT_NE(resumed_log.find("resumed from checkpoint"), std::string::npos) << resumed_log;
  EXPECT_NE(resumed_log.find("at step " + std::to_string(boundary)), std::string::npos) << resumed_log;
}

}  // namespace
}  // namespace herd::testing
