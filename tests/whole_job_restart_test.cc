// Every member of a job dies at once (daemons and trainers SIGKILLed, as in
// a rack power cut) and comes back within the lease. The restarted daemons
// register with new incarnations, so the coordinator starts a fresh
// generation (and key scope) instead of letting the new trainers rendezvous
// with the dead ones' Gloo addresses, which would hang them in Gloo's
// connect for five collective timeouts.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "worker/train/batches/sample_ledger.h"

namespace herd::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

constexpr int64_t kSamples = 40000;

int64_t NewestCheckpointStep(LocalCluster& cluster, const std::string& id) {
  const nlohmann::json catalog = cluster.HerdJson({"checkpoints", id});
  int64_t newest = -1;
  for (const auto& checkpoint : catalog.value("checkpoints", nlohmann::json::array())) {
    newest = std::max(newest, checkpoint.value("step", int64_t{0}));
  }
  return newest;
}

// The generations a worker's newest trainer process names in its log (it
// logs "job context loaded" once, right after its first join).
std::vector<int64_t> GenerationsOfTheNewestTrainer(const std::string& log) {
  const size_t start = log.rfind("job context loaded");
  std::vector<int64_t> generations;
  if (start == std::string::npos) return generations;
  static const std::regex kGeneration("generation (\\d+)");
  const std::string tail = log.substr(start);
  for (std::sregex_iterator it(tail.begin(), tail.end(), kGeneration), end; it != end; ++it) {
    generations.push_back(std::stoll((*it)[1].str()));
  }
  return generations;
}

TEST(WholeJobRestart, AllMembersBackWithinTheLeaseTrainAgainWithoutAStaleRendezvous) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 2;
  options.lease_seconds = 5;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  // restart_budget 1: the restart may cost one unit, a second charge (an
  // echo of the same loss) would fail the job.
  const std::string id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 40000, synthetic_features: 64}
batch_size: 16
epochs: 1
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
log_interval_steps: 5
checkpoint: {interval_steps: 25, keep: 3}
min_workers: 2
max_workers: 2
collective_timeout_seconds: 30
restart_budget: 1
seed: 5
)");
  auto job = WaitForJob(
      cluster, id, [&](const auto& j) { return Field(j, "step") >= 100 && NewestCheckpointStep(cluster, id) >= 50; },
      seconds(120));
  ASSERT_GE(Field(job, "step"), 100) << job.dump(2) << cluster.Logs();
  const int64_t generation_before = Field(job, "generation");

  for (int worker : {0, 1}) SignalWorker(cluster, worker, SIGKILL);
  const nlohmann::json at_kill = cluster.HerdJson({"status", id});
  const int64_t step_at_kill = Field(at_kill, "step");
  const int64_t checkpoint_at_kill = NewestCheckpointStep(cluster, id);
  // Down for one second, well inside the 5 s lease: the coordinator still
  // counts both workers alive, as in the reported failure.
  std::this_thread::sleep_for(seconds(1));
  for (int worker : {0, 1}) cluster.StartWorker(worker);
  const auto restarted = Clock::now();

  job = WaitForJob(
      cluster, id,
      [&](const auto& j) {
        return j.value("state", "") != "RUNNING" ||
               (Field(j, "generation") > generation_before && Field(j, "step") > step_at_kill);
      },
      seconds(90));
  const double resumed_after = std::chrono::duration<double>(Clock::now() - restarted).count();
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  ASSERT_GT(Field(job, "step"), step_at_kill) << job.dump(2) << cluster.Logs();
  std::cerr << "trained past step " << step_at_kill << " again " << resumed_after
            << " s after the daemons restarted (generation " << generation_before << " -> "
            << Field(job, "generation") << ", newest checkpoint at the kill: step " << checkpoint_at_kill << ")\n";
  // The 10 s target is a speed figure (printed above; 8-10 s on a loaded
  // 2-core machine, most of it new trainers starting). What this test holds
  // on any machine is the mechanism: a stale rendezvous first waits out a
  // whole collective timeout (30 s) and then hangs five of them.
  EXPECT_LT(resumed_after, 30.0) << "the restarted job trained again only " << resumed_after << " s later";

  job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << "the restart was charged more than once? " << job.dump(2)
                                                 << cluster.Logs();

  // Nothing committed was lost beyond the rules: the generation that trained
  // after the restart started from the newest checkpoint recorded before the
  // kill (no trainer kept a commit in memory), and every sample of the epoch
  // was trained exactly once in the history that stayed.
  const LedgerReplay replay = ExpectEachSampleOnce(ledger_dir, 1, kSamples, id);
  ASSERT_GE(replay.generation_start_step.size(), 2u);
  const auto& [last_generation, resumed_at] = *replay.generation_start_step.rbegin();
  EXPECT_GT(last_generation, generation_before);
  EXPECT_GE(resumed_at, checkpoint_at_kill) << "resumed from an older checkpoint than the newest";
  EXPECT_LE(resumed_at, step_at_kill);
  const std::string log = ReadFile(cluster.job_dir(0, id) + "/trainer.log");
  EXPECT_NE(log.find("resumed from checkpoint"), std::string::npos) << log;
  // The new trainers never rendezvoused in a generation from before the
  // restart, whose key scope held the dead trainers' addresses: depending
  // on the ports, that failed the generation (charged) or hung it for five
  // collective timeouts.
  for (int worker : {0, 1}) {
    const std::string worker_log = ReadFile(cluster.job_dir(worker, id) + "/trainer.log");
    const std::vector<int64_t> generations = GenerationsOfTheNewestTrainer(worker_log);
    ASSERT_FALSE(generations.empty()) << worker_log;
    EXPECT_GT(*std::min_element(generations.begin(), generations.end()), generation_before)
        << "worker " << worker << "'s new trainer joined a generation of the dead ones: " << worker_log;
  }
}

}  // namespace
}  // namespace herd::testing
