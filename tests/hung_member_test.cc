// A hung member never holds a job, with real processes on loopback, on
// either data plane: a trainer stopped (SIGSTOP) while its daemon
// heartbeats on is left out of the next generation by the survivors'
// reports, shown by herd status with its step, and kept out until its
// trainer answers again (SIGCONT); the job then grows back to it, and every
// sample is seen once. On the TCP mesh (with shared memory on one host) a
// timeout names the peer it waited on, which may itself wait on the hung
// rank; on Gloo a timeout names nobody. Either way the survivors' roll call
// (worker/train/generation/roll_call.h) finds the rank that is neither
// answering nor waiting on its peers (its waiting mark), at once.
#include <gtest/gtest.h>
#include <signal.h>

#include <sstream>
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

struct DataPlaneCase {
  std::string name;
  std::string worker_flag;  // herd-worker --data-plane
  std::string sync;         // the job's sync section
  std::string backend;      // what the trainer says its gradients go over
};

// Gloo for every collective: same_host_transport tcp keeps shared memory
// (which names its peers) out. The TCP mesh keeps it: its gradients go
// through shared memory, its votes and commits through the mesh.
const DataPlaneCase kPlanes[] = {
    {"tcp", "--data-plane=tcp", "", "tcp+shm"},
    {"gloo", "--data-plane=gloo", "sync: {same_host_transport: tcp}\n", "gloo"},
};

std::string Job(const DataPlaneCase& plane) {
  return "dataset: {kind: synthetic, synthetic_samples: " + std::to_string(kSamples) + ", synthetic_features: 32}" +
         R"(
model: mlp
batch_size: 8
epochs: 1
log_interval_steps: 5
min_workers: 2
max_workers: 3
restart_budget: 10
collective_timeout_seconds: 5
)" + plane.sync;
}

// Whether `log` has the roll call's line blaming `rank` of `generation` as
// neither answering nor waiting: "rank R did not answer and was not
// waiting on its peers" (after a timeout naming nobody), or "late rank R
// ..." (a late blame followed to it).
bool BlamesAsNotWaiting(const std::string& log, int64_t generation, int64_t rank) {
  const std::string prefix = "roll call after the failure of generation " + std::to_string(generation) + ": ";
  const std::string who = "rank " + std::to_string(rank) + " ";
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find(prefix);
    if (at == std::string::npos) continue;
    const std::string rest = line.substr(at + prefix.size());
    if ((rest.rfind(who, 0) == 0 || rest.rfind("late " + who, 0) == 0) &&
        rest.find("did not answer and was not waiting on its peers") != std::string::npos) {
      return true;
    }
  }
  return false;
}

class HungMember : public ::testing::TestWithParam<DataPlaneCase> {};

TEST_P(HungMember, IsFoundAtOnceAndStaysOutUntilItAnswers) {
  const DataPlaneCase& plane = GetParam();
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 3;
  options.lease_seconds = 3;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  options.worker_args.assign(3, {plane.worker_flag});
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(Job(plane));
  auto job = WaitForJob(
      cluster, id, [](const auto& j) { return Field(j, "world_size") == 3 && Field(j, "step") >= 20; }, seconds(120));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  const int64_t generation = Field(job, "generation");
  const std::string survivor_log = cluster.job_dir(0, id) + "/trainer.log";
  ASSERT_NE(ReadFile(survivor_log).find("steps per epoch, "), std::string::npos) << ReadFile(survivor_log);
  ASSERT_NE(ReadFile(survivor_log).find(" over " + plane.backend), std::string::npos)
      << "the job does not run over " << plane.backend << ": " << ReadFile(survivor_log);
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
  // The survivor that finished its roll call first reported it; the other
  // may have found the generation already ended by that report.
  const int64_t hung = Field(job["unresponsive"][0], "rank");
  const std::string other_log = ReadFile(cluster.job_dir(1, id) + "/trainer.log");
  EXPECT_TRUE(BlamesAsNotWaiting(ReadFile(survivor_log), generation, hung) ||
              BlamesAsNotWaiting(other_log, generation, hung))
      << "no survivor's roll call blamed rank " << hung << " as not waiting on its peers: " << ReadFile(survivor_log)
      << other_log;
  // Nobody waited out a roll call's window for it.
  for (const std::string& log : {ReadFile(survivor_log), other_log}) {
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
  // The woken trainer blamed nobody: its peers' report had ended the
  // generation.
  const std::string woken_log = ReadFile(cluster.job_dir(2, id) + "/trainer.log");
  EXPECT_EQ(woken_log.find("blaming it"), std::string::npos) << woken_log;
  EXPECT_EQ(woken_log.find(": it hangs"), std::string::npos) << woken_log;

  // Every step of the epoch, each sample once, in the history that stayed.
  job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  ExpectEachSampleOnce(ledger_dir, 1, kSamples, id);
}

INSTANTIATE_TEST_SUITE_P(DataPlanes, HungMember, ::testing::ValuesIn(kPlanes),
                         [](const ::testing::TestParamInfo<DataPlaneCase>& info) { return info.param.name; });

}  // namespace
}  // namespace herd::testing
