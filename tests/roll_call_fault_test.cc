// A hung member never holds a job on a data plane that cannot name it, with
// real processes on loopback: on Gloo a collective timeout blames nobody, so
// the survivors find the hung rank by a roll call in the generation's KV
// before they report, and the coordinator leaves it out until its trainer
// answers. Without the roll call the next generation would take the hung
// member (its daemon heartbeats) and stall again.
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <tuple>
#include <vector>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/process.h"
#include "worker/train/batches/sample_ledger.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

constexpr int64_t kSamples = 24000;
constexpr double kCollectiveTimeout = 5;

// Gloo for every collective: same_host_transport tcp keeps shared memory
// (which names its peers) out, and the workers run --data-plane=gloo.
constexpr char kJob[] = R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 24000, synthetic_features: 32}
batch_size: 8
epochs: 1
log_interval_steps: 5
min_workers: 2
max_workers: 3
restart_budget: 10
collective_timeout_seconds: 5
sync: {same_host_transport: tcp}
)";

TEST(RollCallFault, HungTrainerOnGlooIsFoundByRollCallAndStaysOutUntilItAnswers) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 3;
  options.lease_seconds = 3;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  options.worker_args.assign(3, {"--data-plane=gloo"});
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(kJob);
  auto job = WaitForJob(
      cluster, id, [](const auto& j) { return Field(j, "world_size") == 3 && Field(j, "step") >= 20; }, seconds(120));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  const int64_t generation = Field(job, "generation");
  const std::string survivor_log = cluster.job_dir(0, id) + "/trainer.log";
  ASSERT_NE(ReadFile(survivor_log).find("steps per epoch, "), std::string::npos) << ReadFile(survivor_log);
  ASSERT_NE(ReadFile(survivor_log).find(" over gloo"), std::string::npos)
      << "the job does not run on Gloo: " << ReadFile(survivor_log);
  const std::vector<pid_t> trainers = TrainerPids(cluster, 2);
  ASSERT_EQ(trainers.size(), 1u) << cluster.Logs();

  // Only the trainer hangs; its daemon heartbeats on with it "running".
  ASSERT_EQ(::kill(trainers[0], SIGSTOP), 0);
  double resumed_after = 0;
  std::tie(job, resumed_after) = WaitForProgressOn(cluster, id, 2, Field(job, "step"), seconds(60));
  ASSERT_EQ(Field(job, "world_size"), 2) << job.dump(2) << cluster.Logs();
  std::cerr << "trained on 2 workers " << resumed_after << " s after SIGSTOP (collective timeout "
            << kCollectiveTimeout << " s)\n";
  EXPECT_LT(resumed_after, kCollectiveTimeout + 4) << "the survivors waited past the collective timeout";
  EXPECT_EQ(Field(job, "generation"), generation + 1) << "the hung member was taken back while hung: " << job.dump(2);
  // herd status names the member that hung and the step.
  ASSERT_NO_FATAL_FAILURE(ExpectShownAsHung(cluster, id, job, 2, 21));
  const auto& hung = job["unresponsive"][0];
  const std::string blamed = "roll call after the failure of generation " + std::to_string(generation) + ": rank " +
                             std::to_string(Field(hung, "rank")) +
                             " did not answer and was not waiting on its peers: blaming it";
  // The survivor that finished its roll call first reported it; the other
  // may have found the generation already ended by that report.
  const std::string other_log = ReadFile(cluster.job_dir(1, id) + "/trainer.log");
  EXPECT_TRUE(ReadFile(survivor_log).find(blamed) != std::string::npos || other_log.find(blamed) != std::string::npos)
      << "no survivor logged \"" << blamed << "\": " << ReadFile(survivor_log) << other_log;

  // Hung for several leases: the job does not take it back meanwhile.
  const int64_t step = Field(job, "step");
  job = WaitForJob(
      cluster, id, [&](const auto& j) { return j.value("state", "") != "RUNNING" || Field(j, "step") >= step + 200; },
      seconds(120));
  ASSERT_GE(Field(job, "step"), step + 200) << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "generation"), generation + 1) << job.dump(2);
  EXPECT_EQ(Field(job, "world_size"), 2) << job.dump(2);

  // It answers again: the job re-forms with it at a step boundary. The
  // survivors wait (stopped) until the re-form is asked, so the job cannot
  // end before.
  ASSERT_TRUE(HoldTrainersUntilReformAsked(cluster, id, {0, 1}, generation + 1,
                                           [&] { return ::kill(trainers[0], SIGCONT) == 0; }, seconds(60)))
      << "no re-form was asked for the member that answered again: " << cluster.Logs();
  job = WaitForJob(
      cluster, id, [](const auto& j) { return j.value("state", "") != "RUNNING" || Field(j, "world_size") == 3; },
      seconds(60));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  EXPECT_TRUE(job.value("unresponsive", nlohmann::json::array()).empty()) << job.dump(2);
  // The woken trainer blamed nobody: its peers had answered, or their
  // report had ended the generation.
  const std::string woken_log = ReadFile(cluster.job_dir(2, id) + "/trainer.log");
  EXPECT_EQ(woken_log.find("did not answer within"), std::string::npos) << woken_log;

  // Every step of the epoch, each sample once, in the history that stayed.
  job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  ExpectEachSampleOnce(ledger_dir, 1, kSamples, id);
}

}  // namespace
}  // namespace herd::testing
