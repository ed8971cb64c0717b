// Fault tolerance end to end, with real processes on loopback: survivors of a
// failed generation continue from their commit in memory, newcomers heal from
// a peer, a hung worker is evicted, the coordinator can crash mid-training,
// the restart budget ends a job cleanly, and a checkpoint resume is exact.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <numeric>
#include <thread>
#include <tuple>
#include <utility>

#include "tests/harness/final_model.h"
#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "worker/train/checkpoint/checkpoint_files.h"
#include "worker/train/batches/sample_ledger.h"

namespace herd::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

constexpr int64_t kLedgerSamples = 24000;

// SIGKILL one of three workers mid-training: the two survivors report the
// failure, roll back to their commit in memory and continue within 10 s. A
// replacement worker then joins and heals from a survivor. The sample
// ledger proves every sample of each epoch was consumed exactly once by the
// history that stayed, and all final members hold identical parameters.
void KillOneOfThreeThenReplacementHeals(const std::string& sync) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 3;
  options.lease_seconds = 3;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 24000, synthetic_features: 64}
batch_size: 16
epochs: 2
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
log_interval_steps: 5
min_workers: 2
max_workers: 3
collective_timeout_seconds: 5
seed: 11
)" + sync);
  auto job = WaitForJob(cluster, id, [](const auto& j) { return Field(j, "step") >= 60; }, seconds(120));
  ASSERT_GE(Field(job, "step"), 60) << job.dump(2) << cluster.Logs();
  ASSERT_EQ(Field(job, "world_size"), 3);
  const int64_t first_generation = Field(job, "generation");

  SignalWorker(cluster, 2, SIGKILL);
  const int64_t step_at_kill = Field(cluster.HerdJson({"status", id}), "step");
  double recovered_after = 0;
  std::tie(job, recovered_after) = WaitForProgressOn(cluster, id, 2, step_at_kill, seconds(30));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  ASSERT_EQ(Field(job, "world_size"), 2) << job.dump(2) << cluster.Logs();
  std::cerr << "continued on 2 workers " << recovered_after << " s after the kill (step " << step_at_kill << " -> "
            << Field(job, "step") << ", generation " << Field(job, "generation") << ")\n";
  EXPECT_LT(recovered_after, 10.0) << "the survivors continued only " << recovered_after << " s after the kill";
  EXPECT_GT(Field(job, "generation"), first_generation);

  // A replacement joins below max_workers and heals from a survivor; the
  // survivors wait (stopped) until they are asked to re-form for it, so the
  // job cannot end before it joins.
  const int64_t survivors_generation = Field(job, "generation");
  ASSERT_TRUE(HoldTrainersUntilReformAsked(
      cluster, id, {0, 1}, survivors_generation,
      [&] {
        cluster.StartWorker(3);
        return true;
      },
      seconds(60)))
      << "no re-form was asked for the replacement: " << cluster.Logs();
  job = WaitForJob(
      cluster, id,
      [&](const auto& j) {
        return j.value("state", "") != "RUNNING" ||
               (Field(j, "world_size") == 3 && Field(j, "generation") > survivors_generation);
      },
      seconds(60));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  ASSERT_EQ(job.value("state", ""), "RUNNING") << "the job ended before the replacement joined: " << job.dump(2);

  job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();

  // Survivors recovered in memory (no checkpoints exist) and the replacement
  // received the state from a peer.
  // ... without reloading data or model: one job context per trainer
  // process, every later generation re-formed on top of it.
  for (int survivor : {0, 1}) {
    const std::string log = ReadFile(cluster.job_dir(survivor, id) + "/trainer.log");
    EXPECT_NE(log.find("keeping the job context and the commit of step"), std::string::npos) << log;
    EXPECT_EQ(Count(log, "job context loaded"), 1) << log;
    EXPECT_GE(Count(log, "(no reload)"), 3) << "start, after the kill, after the join: " << log;
  }
  const std::string replacement_log = ReadFile(cluster.job_dir(3, id) + "/trainer.log");
  EXPECT_NE(replacement_log.find("healed from rank"), std::string::npos) << replacement_log;
  EXPECT_TRUE(cluster.HerdJson({"checkpoints", id})["checkpoints"].empty());

  const LedgerReplay replay = ExpectEachSampleOnce(ledger_dir, 2, kLedgerSamples);
  std::cerr << replay.generation_start_step.size() << " generations trained, " << replay.rolled_back_records
            << " step records rolled back and re-run\n";
  EXPECT_GE(replay.generation_start_step.size(), 3u);  // start, after the kill, after the join

  // Identical parameters on every final member: the two survivors and the replacement.
  const auto reference = LoadFinalModel(cluster.job_dir(0, id));
  for (int worker : {1, 3}) {
    EXPECT_TRUE(DifferingTensors(reference, LoadFinalModel(cluster.job_dir(worker, id))).empty()) << worker;
  }
  EXPECT_FALSE(fs::exists(cluster.job_dir(2, id) + "/model-final.pt"));
}

TEST(FaultTolerance, KillOneOfThreeThenReplacementHealsExactlyOnce) { KillOneOfThreeThenReplacementHeals(""); }

// The same in sync mode average with the Nesterov outer optimizer: commits
// fall on averaging rounds, and the outer momentum travels with the heal
// (the final bitwise replica check would fail otherwise).
TEST(FaultTolerance, AveragingModeRecoversAndHealsTheOuterState) {
  KillOneOfThreeThenReplacementHeals("sync: {mode: average, every: 4, outer: {kind: nesterov}}\n");
}

// SIGSTOP a whole worker (daemon and trainer): the survivors' collectives
// time out, they report it, the hung worker's lease runs out and the job
// continues without it.
TEST(FaultTolerance, HungWorkerIsEvicted) {
  ClusterOptions options;
  options.workers = 3;
  options.lease_seconds = 3;
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 24000, synthetic_features: 64}
batch_size: 16
epochs: 1
log_interval_steps: 5
min_workers: 2
max_workers: 3
collective_timeout_seconds: 3
)");
  auto job = WaitForJob(cluster, id, [](const auto& j) { return Field(j, "step") >= 40; }, seconds(120));
  ASSERT_GE(Field(job, "step"), 40) << job.dump(2) << cluster.Logs();

  SignalWorker(cluster, 2, SIGSTOP);
  double evicted_after = 0;
  std::tie(job, evicted_after) = WaitForProgressOn(cluster, id, 2, Field(job, "step"), seconds(60));
  SignalWorker(cluster, 2, SIGKILL);  // a stopped process ignores SIGTERM at teardown
  ASSERT_EQ(Field(job, "world_size"), 2) << job.dump(2) << cluster.Logs();
  std::cerr << "continued without the stopped worker " << evicted_after << " s after SIGSTOP\n";
  // Detection takes one collective timeout, eviction one lease after that.
  EXPECT_LT(evicted_after, 3 + 3 + 6.0) << evicted_after;
  // A survivor's collective timed out. Which one is a race: the first to
  // time out tears its connections down, and its peer may see that closed
  // connection (UNAVAILABLE) before its own deadline.
  const std::string logs = ReadFile(cluster.job_dir(0, id) + "/trainer.log") +
                           ReadFile(cluster.job_dir(1, id) + "/trainer.log");
  EXPECT_NE(logs.find("DEADLINE_EXCEEDED"), std::string::npos) << logs;

  job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(240));
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
}

// SIGKILL the coordinator mid-training and restart it: the data path never
// needed it, so the job keeps its generation and finishes; the job record and
// the checkpoint catalog survive intact.
TEST(FaultTolerance, CoordinatorCrashMidTrainingJobFinishes) {
  ClusterOptions options;
  options.workers = 2;
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(R"(
name: survives-coordinator
model: mlp
dataset: {kind: synthetic, synthetic_samples: 40000, synthetic_features: 64}
batch_size: 16
epochs: 1
log_interval_steps: 10
checkpoint: {interval_steps: 100, keep: 20}
min_workers: 2
)");
  auto catalog = cluster.HerdJson({"checkpoints", id});
  const auto deadline = Clock::now() + seconds(120);
  while (catalog["checkpoints"].empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    catalog = cluster.HerdJson({"checkpoints", id});
  }
  ASSERT_FALSE(catalog["checkpoints"].empty()) << cluster.Logs();
  const nlohmann::json before = cluster.HerdJson({"status", id});

  // Down until training has ended: the trainers finish, evaluate and exit
  // while nobody hears their last reports (on any machine speed). The
  // restart also finds the dead coordinator's state-dir lock, which must not
  // block it.
  cluster.StopCoordinator(SIGKILL);
  const auto trainers_deadline = Clock::now() + seconds(300);
  while ((!TrainerPids(cluster, 0).empty() || !TrainerPids(cluster, 1).empty()) &&
         Clock::now() < trainers_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(TrainerPids(cluster, 0).empty() && TrainerPids(cluster, 1).empty())
      << cluster.Logs();
  cluster.StartCoordinator();

  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(job.value("name", ""), "survives-coordinator");
  EXPECT_EQ(Field(job, "generation"), Field(before, "generation")) << "the job should not have needed a new generation";
  // The true end, carried with the trainers' exits: last step, loss, the
  // final evaluation and the whole run's throughput.
  EXPECT_EQ(Field(job, "step"), Field(job, "total_steps")) << job.dump(2);
  EXPECT_EQ(Field(job, "epoch"), 1) << job.dump(2);
  EXPECT_GT(job.value("loss", 0.0), 0.0) << job.dump(2);
  EXPECT_GT(job.value("samples_per_second", 0.0), 0.0) << job.dump(2);
  ASSERT_TRUE(job.contains("eval")) << job.dump(2);
  EXPECT_TRUE(job["eval"].contains("accuracy")) << job.dump(2);
  // Every checkpoint recorded before the crash is still listed, and all verify.
  auto after = cluster.HerdJson({"checkpoints", id});
  std::set<std::string> listed;
  for (const auto& c : after["checkpoints"]) {
    listed.insert(c["id"].get<std::string>());
    auto files = ReadCheckpointFolder(cluster.checkpoint_root(), c["path"].get<std::string>());
    EXPECT_TRUE(files.ok()) << files.status();
  }
  for (const auto& c : catalog["checkpoints"]) EXPECT_EQ(listed.count(c["id"].get<std::string>()), 1u) << c.dump();
}

// With restart_budget 1, the second loss of every trainer fails the job with
// the reason, and no trainer of it is left running anywhere.
TEST(FaultTolerance, ExhaustedRestartBudgetFailsTheJobAndLeavesNoTrainer) {
  ClusterOptions options;
  options.workers = 2;
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 100000, synthetic_features: 64}
batch_size: 16
epochs: 1
log_interval_steps: 5
checkpoint: {interval_steps: 10}
min_workers: 2
restart_budget: 1
)");
  const std::vector<std::string> kill_trainers = {"/usr/bin/pkill", "-KILL", "-f", "herd-trainer .*--job=" + id};
  for (int round = 0; round < 2; ++round) {
    // A generation starts from the step committed when the last one died,
    // which can be past any step this test saw (the trainers commit every 5
    // steps, fast): wait until this generation has trained 10 steps past
    // its own start, so its trainers are running when they are killed, and
    // until a checkpoint is recorded: a loss of every trainer resumes from
    // one (with none yet, it fails the job at once, a different case).
    auto started =
        WaitForJob(cluster, id, [&](const auto& j) { return Field(j, "generation") >= round + 1; }, seconds(120));
    ASSERT_EQ(Field(started, "generation"), round + 1) << started.dump(2) << cluster.Logs();
    const int64_t start_step = Field(started, "step");
    auto job = WaitForJob(
        cluster, id,
        [&](const auto& j) {
          return Field(j, "generation") != round + 1 ||
                 (Field(j, "step") >= start_step + 10 &&
                  !cluster.HerdJson({"checkpoints", id}).value("checkpoints", nlohmann::json::array()).empty());
        },
        seconds(120));
    ASSERT_EQ(Field(job, "generation"), round + 1) << job.dump(2) << cluster.Logs();
    ASSERT_GE(Field(job, "step"), start_step + 10) << job.dump(2) << cluster.Logs();
    ASSERT_EQ(RunCommand(kill_trainers, seconds(10)).exit_code, 0) << job.dump(2) << cluster.Logs();
  }
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(60));
  ASSERT_EQ(job.value("state", ""), "FAILED") << job.dump(2) << cluster.Logs();
  EXPECT_NE(job.value("reason", "").find("restart budget"), std::string::npos) << job.dump(2);
  // Trainers of a failed job are stopped by their daemons.
  const auto deadline = Clock::now() + seconds(15);
  bool alive = true;
  while (alive && Clock::now() < deadline) {
    alive = RunCommand({"/usr/bin/pgrep", "-f", "herd-trainer .*--job=" + id}, seconds(10)).exit_code == 0;
    if (alive) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_FALSE(alive) << "a trainer of the failed job is still running";
}

// A job whose trainers all die resumes from its newest checkpoint and ends
// with bitwise the same parameters as the same job run without interruption:
// same seed, same sampler order, restored optimizer state and step, and a
// 2-rank Gloo sum (a + b) that does not depend on arrival order. The
// tolerance is therefore zero.
// The kill lands once two checkpoints are listed (step 100); the job runs
// 1500 steps so that it is still training then on a machine many times
// faster than the catalog poll.
TEST(FaultTolerance, CheckpointResumeIsExact) {
  ClusterOptions options;
  options.workers = 2;
  LocalCluster cluster(options);
  const std::string spec = R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 100000, synthetic_features: 64}
batch_size: 16
max_steps: 1500
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
schedule: {name: cosine, warmup_steps: 20}
log_interval_steps: 10
checkpoint: {interval_steps: 50, keep: 2}
min_workers: 2
seed: 23
)";
  const std::string uninterrupted = cluster.Submit(spec);
  auto job = cluster.WaitForState(uninterrupted, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();

  const std::string resumed = cluster.Submit(spec);
  auto catalog = cluster.HerdJson({"checkpoints", resumed});
  const auto deadline = Clock::now() + seconds(120);
  while (catalog["checkpoints"].size() < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    catalog = cluster.HerdJson({"checkpoints", resumed});
  }
  ASSERT_GE(catalog["checkpoints"].size(), 2u) << cluster.Logs();
  ASSERT_EQ(RunCommand({"/usr/bin/pkill", "-KILL", "-f", "herd-trainer .*--job=" + resumed}, seconds(10)).exit_code, 0);
  job = cluster.WaitForState(resumed, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  ASSERT_GE(Field(job, "generation"), 2);
  EXPECT_NE(ReadFile(cluster.job_dir(0, resumed) + "/trainer.log").find("resumed from checkpoint"), std::string::npos);

  for (int worker : {0, 1}) {
    auto differing = DifferingTensors(LoadFinalModel(cluster.job_dir(worker, uninterrupted)),
                                      LoadFinalModel(cluster.job_dir(worker, resumed)));
    EXPECT_TRUE(differing.empty()) << "worker " << worker << ": " << differing.size() << " tensors differ, first "
                                   << differing.front();
  }
}

}  // namespace
}  // namespace herd::testing
