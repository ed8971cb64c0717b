// A dead or hung member never holds a job, with real processes on loopback:
// the survivors' failure reports name it, and the coordinator leaves it out
// of the next generation at once. A dead worker (SIGKILL) costs one
// generation, not a wait for its heartbeat silence; a hung trainer
// (SIGSTOP, its daemon still heartbeating) stays out, shown by herd status
// with its step, until it answers again (SIGCONT), and the job then grows
// back to it.
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

TEST(MemberFault, HungTrainerStaysOutUntilItAnswersThenTheJobGrowsBack) {
  ClusterOptions options;
  options.workers = 3;
  options.lease_seconds = 3;
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(kJob);
  auto job = WaitForJob(
      cluster, id, [](const auto& j) { return Field(j, "world_size") == 3 && Field(j, "step") >= 20; }, seconds(120));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  const int64_t generation = Field(job, "generation");
  const std::vector<pid_t> trainers = TrainerPids(cluster, 2);
  ASSERT_EQ(trainers.size(), 1u) << cluster.Logs();

  // Only the trainer hangs; its daemon heartbeats on with it "running".
  ASSERT_EQ(::kill(trainers[0], SIGSTOP), 0);
  double resumed_after = 0;
  std::tie(job, resumed_after) = WaitForProgressOn(cluster, id, 2, Field(job, "step"), seconds(60));
  ASSERT_EQ(Field(job, "world_size"), 2) << job.dump(2) << cluster.Logs();
  std::cerr << "trained on 2 workers " << resumed_after << " s after SIGSTOP (collective timeout 5 s)\n";
  EXPECT_EQ(Field(job, "generation"), generation + 1) << "the hung member was taken back while hung: " << job.dump(2);
  // herd status names the member that hung and the step.
  ASSERT_NO_FATAL_FAILURE(ExpectShownAsHung(cluster, id, job, 2, 21));
  // herd's own transports named the hung rank, or a peer waiting on it
  // whose blame the roll call followed: never a wait for a rank that is
  // neither answered nor waiting on its peers.
  for (int survivor : {0, 1}) {
    const std::string log = ReadFile(cluster.job_dir(survivor, id) + "/trainer.log");
    EXPECT_EQ(log.find("did not answer within"), std::string::npos) << log;
  }

  // Hung for several leases: the job does not take it back meanwhile.
  const int64_t step = Field(job, "step");
  job = WaitForJob(
      cluster, id, [&](const auto& j) { return j.value("state", "") != "RUNNING" || Field(j, "step") >= step + 300; },
      seconds(120));
  ASSERT_GE(Field(job, "step"), step + 300) << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "generation"), generation + 1) << job.dump(2);
  EXPECT_EQ(Field(job, "world_size"), 2) << job.dump(2);

  // It answers again: the job re-forms with it at a step boundary.
  ASSERT_EQ(::kill(trainers[0], SIGCONT), 0);
  job = WaitForJob(
      cluster, id, [](const auto& j) { return j.value("state", "") != "RUNNING" || Field(j, "world_size") == 3; },
      seconds(60));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  EXPECT_TRUE(job.value("unresponsive", nlohmann::json::array()).empty()) << job.dump(2);
  cluster.Herd({"cancel", id});
}

}  // namespace
}  // namespace herd::testing
