// sync.overlap_steps: auto on a testbed whose links change under a running
// job: tau grows when the hosts' links get a long delay (and the job says
// when even tau = sync.every cannot hide a round), and shrinks again when
// the delay goes, down to what the job's measurement of the fast link then
// asks for. Every decision is the same on every rank (their logs
// agree), and herd status shows what tau is and why.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/process.h"
#include "tests/harness/testbed_cluster.h"
#include "tests/testbed/testbed.h"
#include "worker/train/sync/overlap_controller.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

constexpr int kHosts = 3;
constexpr int kEvery = 64;

// collective_timeout_seconds: a delay change drops the frames its relay
// holds, and TCP over the new 600 ms round trip recovers slowly: on a
// loaded machine a round right after was 22 s in flight (its collectives
// one after another), the full sync after it 28 s. No peer hangs in this
// test, so the timeout only has to stay clear of that.
std::string AutoJob() {
  return "model: mlp\n"
         "dataset: {kind: synthetic}\n"
         "batch_size: 16\n"
         "max_steps: 1000000\n"
         "optimizer: {name: sgd, lr: 0.05}\n"
         "sync: {mode: average, every: " + std::to_string(kEvery) + ", fragments: 4, overlap_steps: auto}\n"
         "log_interval_steps: 1\n"
         "seed: 3\n"
         "min_workers: 3\nmax_workers: 3\n"
         "collective_timeout_seconds: 120\n";
}

bool Ended(const nlohmann::json& job) {
  const std::string state = job.value("state", "");
  return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED";
}

int64_t Tau(const nlohmann::json& job) {
  if (!job.contains("sync_state")) return 0;
  return job["sync_state"].value("overlap_steps", int64_t{0});
}

// The round and step times tau was last chosen from (0 before the
// generation measured any).
double RoundSeconds(const nlohmann::json& job) {
  return job.contains("sync_state") ? job["sync_state"].value("round_seconds", 0.0) : 0.0;
}
double StepSeconds(const nlohmann::json& job) {
  return job.contains("sync_state") ? job["sync_state"].value("step_seconds", 0.0) : 0.0;
}

// What the controller makes of the measurement the status shows (the one
// its tau was chosen from): how many steps it needs, and whether that is
// beyond sync.every.
OverlapDecision DecisionOn(const nlohmann::json& job) {
  OverlapBounds bounds;
  bounds.max_steps = kEvery;
  return ChooseOverlap(Tau(job), OverlapMeasurement{RoundSeconds(job), StepSeconds(job), 0}, bounds);
}

// Whether the job warns exactly where the measurement it reports needs
// more steps than sync.every. The warning is any rank's latest report's,
// the measurement rank 0's: a status read while the ranks report one
// commit may hold two commits' values, so a wait asks for both to agree.
bool WarnsAsMeasured(const nlohmann::json& job) {
  const bool warned = job.value("warning", "").find("the link needs") != std::string::npos;
  return warned == DecisionOn(job).beyond_bound;
}

// One of the trainer's tau decisions: "overlap_steps auto: 8 -> 15 at step 24".
struct Decision {
  std::string line;
  int64_t step = 0;
};

// A trainer's tau decisions, in order.
std::vector<Decision> Decisions(const std::string& log) {
  static const std::regex line(R"(overlap_steps auto: (\d+) -> (\d+) at step (\d+))");
  std::vector<Decision> out;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
    out.push_back(Decision{it->str(), std::stoll((*it)[3].str())});
  }
  return out;
}

TEST(OverlapAuto, TauFollowsTheLinkAsItsDelayChanges) {
  testbed::TestbedOptions options;
  options.hosts = kHosts;
  auto bed = testbed::Testbed::Create(options);
  ASSERT_TRUE(bed.ok()) << bed.status();
  // Every host's link goes through its delaying relay from the start, at no
  // delay: the first SetDelay moves the link to put the relay on it, and
  // the frames lost meanwhile make TCP back off (a running job's rounds
  // then blocked up to 18 s); later calls only restart the relay. The fast
  // link the job starts on is also the one it returns to when the delay goes.
  for (int h = 0; h < kHosts; ++h) {
    const absl::Status relayed = (*bed)->SetDelay(h, 0);
    ASSERT_TRUE(relayed.ok()) << relayed;
  }
  auto cluster = std::make_unique<LocalCluster>(ClusterOnTestbed(**bed));
  const std::string id = cluster->Submit(AutoJob());

  // Fast links: a round of a small model hides in a few steps.
  auto job = WaitForJob(
      *cluster, id, [](const auto& j) { return Ended(j) || Field(j, "step") >= 300; }, seconds(300));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster->Logs();
  ASSERT_TRUE(job.contains("sync_state")) << job.dump(2);
  EXPECT_TRUE(job["sync_state"].value("overlap_auto", false)) << job.dump(2);
  // How far tau is from sync.every here depends on the machine (a loaded
  // one makes even an undelayed round slow): what follows only asks tau to
  // move from wherever it stands, and to say so when every is not enough.
  const int64_t fast_tau = Tau(job);
  ASSERT_GE(fast_tau, 1);
  ASSERT_LE(fast_tau, kEvery) << job.dump(2);

  // 150 ms each way on every host's link: host to host, 300 ms one way, so
  // a round (a reduce-scatter hop, an all-gather hop) takes 0.6 s or more.
  for (int h = 0; h < kHosts; ++h) {
    const absl::Status delayed = (*bed)->SetDelay(h, 150);
    ASSERT_TRUE(delayed.ok()) << delayed;
  }
  const int64_t slow_tau = std::min<int64_t>(kEvery, fast_tau + 8);
  // Both together: on a loaded machine tau can cross the bar from a slow
  // step before the delayed rounds dominate the measurement it reports.
  // Where even tau = every cannot hide such a round, the job says so (and
  // only there).
  job = WaitForJob(
      *cluster, id,
      [&](const auto& j) { return Ended(j) || (Tau(j) >= slow_tau && RoundSeconds(j) > 0.6 && WarnsAsMeasured(j)); },
      seconds(300));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster->Logs();
  ASSERT_GE(Tau(job), slow_tau) << job.dump(2);
  EXPECT_GT(RoundSeconds(job), 0.6) << job.dump(2);
  EXPECT_TRUE(WarnsAsMeasured(job)) << job.dump(2);
  const int64_t delayed_tau = Tau(job);
  const double delayed_round_seconds = RoundSeconds(job);
  if (DecisionOn(job).beyond_bound) {
    EXPECT_NE(job.value("warning", "").find("steps per round; sync.every is 64"), std::string::npos) << job.dump(2);
  }

  // The delay goes: the rounds the job measures get faster, and tau comes
  // down, a decision at a time, until it is what that measurement needs (or
  // one more, while a round stays exposed at exactly that). Not a bound
  // taken in the first phase: the fast link's need moves with the machine's
  // load, so tau may settle anywhere below the delayed tau. Below it, tau is
  // below sync.every and at least what its measurement needs: no warning.
  for (int h = 0; h < kHosts; ++h) {
    const absl::Status undelayed = (*bed)->SetDelay(h, 0);
    ASSERT_TRUE(undelayed.ok()) << undelayed;
  }
  // StepSeconds: a measurement at all (a generation that restarted has none yet).
  auto settled = [&](const nlohmann::json& j) {
    return StepSeconds(j) > 0 && RoundSeconds(j) < delayed_round_seconds && Tau(j) < delayed_tau &&
           Tau(j) <= DecisionOn(j).needed_steps + 1 && WarnsAsMeasured(j);
  };
  job = WaitForJob(*cluster, id, [&](const auto& j) { return Ended(j) || settled(j); }, seconds(300));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster->Logs();
  EXPECT_LT(RoundSeconds(job), delayed_round_seconds) << job.dump(2);
  EXPECT_LT(Tau(job), delayed_tau) << job.dump(2);
  EXPECT_LE(Tau(job), DecisionOn(job).needed_steps + 1) << job.dump(2);
  EXPECT_EQ(job.value("warning", ""), "") << job.dump(2);

  auto cancel = cluster->Herd({"cancel", id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.out << cancel.err;
  job = cluster->WaitForState(id, {"CANCELLED", "FAILED", "SUCCEEDED"}, seconds(120));
  EXPECT_EQ(job.value("state", ""), "CANCELLED") << job.dump(2);

  // Every rank took the same decisions at the same steps. The cancel stops
  // ranks at different steps (between merges they do not move in lock
  // step), but each rank passed the step of its own last decision, so
  // every rank passed the earliest of those, and up to it their decisions
  // are one list.
  std::vector<std::vector<Decision>> decisions;
  int64_t all_passed = INT64_MAX;
  for (int i = 0; i < kHosts; ++i) {
    decisions.push_back(Decisions(ReadFile(cluster->job_dir(i, id) + "/trainer.log")));
    ASSERT_FALSE(decisions.back().empty()) << "worker " << i;
    all_passed = std::min(all_passed, decisions.back().back().step);
  }
  auto up_to_all_passed = [&](const std::vector<Decision>& list) {
    std::vector<std::string> lines;
    for (const Decision& d : list) {
      if (d.step <= all_passed) lines.push_back(d.line);
    }
    return lines;
  };
  const std::vector<std::string> reference = up_to_all_passed(decisions[0]);
  ASSERT_GE(reference.size(), 2u);  // it grew and it shrank
  for (int i = 1; i < kHosts; ++i) EXPECT_EQ(up_to_all_passed(decisions[i]), reference) << "rank of worker " << i;
  cluster.reset();  // processes stop before their hosts go
}

}  // namespace
}  // namespace herd::testing
