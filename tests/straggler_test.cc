// Straggler detection and throughput shares with real processes
// on loopback: three workers train one job; the test slows worker-2's
// trainer from outside by duty-cycling it with SIGSTOP/SIGCONT (no cgroups,
// no knob in the product) and waits until `herd status` names it as the
// slowest rank, holding the others back by a clear share of each step; with
// sync.shares throughput, until its share of each step shrinks, while every
// sample is still trained exactly once per epoch.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "worker/train/sample_ledger.h"

namespace herd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Long enough to outlast the test (it is cancelled at the end).
constexpr char kJob[] =
    "model: mlp\n"
    "dataset: {kind: synthetic, synthetic_samples: 24000, synthetic_features: 64}\n"
    "batch_size: 16\n"
    "epochs: 200\n"
    "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
    "log_interval_steps: 10\n"
    "collective_timeout_seconds: 30\n"
    "seed: 7\n"
    "min_workers: 3\n"
    "max_workers: 3\n";

// Slows a process to about `running` of its speed: a thread lets it run for
// that share of each `period`, and stops it (SIGSTOP) for the rest. Always
// leaves it running (SIGCONT) when destroyed.
class DutyCycle {
 public:
  DutyCycle(pid_t pid, double running, milliseconds period)
      : pid_(pid), thread_([this, running, period] {
          const auto run = std::chrono::duration_cast<std::chrono::microseconds>(period * running);
          const auto stop = std::chrono::duration_cast<std::chrono::microseconds>(period) - run;
          while (!done_.load()) {
            kill(pid_, SIGCONT);
            std::this_thread::sleep_for(run);
            if (done_.load()) break;
            kill(pid_, SIGSTOP);
            std::this_thread::sleep_for(stop);
          }
          kill(pid_, SIGCONT);
        }) {}
  ~DutyCycle() {
    done_ = true;
    thread_.join();
    kill(pid_, SIGCONT);
  }
  DutyCycle(const DutyCycle&) = delete;
  DutyCycle& operator=(const DutyCycle&) = delete;

 private:
  const pid_t pid_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

std::string StragglerWorker(const nlohmann::json& job) {
  if (!job.contains("straggler") || !job["straggler"].is_object()) return "";
  return job["straggler"].value("worker_id", "");
}

// Neither waiting to start nor training: the job ended.
bool Ended(const nlohmann::json& job) {
  const std::string state = job.value("state", "");
  return state != "PENDING" && state != "RUNNING";
}

double Holdback(const nlohmann::json& job) {
  if (!job.contains("straggler") || !job["straggler"].is_object()) return 0;
  return job["straggler"].value("holdback_fraction", 0.0);
}

TEST(Straggler, StatusNamesTheDutyCycledWorker) {
  ClusterOptions options;
  options.workers = 3;
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(kJob);

  // Unslowed, 3 ranks training: a slowest rank is named already (whichever).
  auto job = WaitForJob(
      cluster, id,
      [](const auto& j) {
        return Ended(j) || (Field(j, "world_size") == 3 && !StragglerWorker(j).empty());
      },
      seconds(180));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  ASSERT_FALSE(StragglerWorker(job).empty()) << job.dump(2) << cluster.Logs();
  const int64_t generation = Field(job, "generation");

  const std::vector<pid_t> trainer = TrainerPids(cluster, 2);
  ASSERT_EQ(trainer.size(), 1u) << cluster.Logs();
  const std::string slowed = cluster.worker_id(2);
  {
    DutyCycle slow(trainer[0], 0.3, milliseconds(30));
    job = WaitForJob(
        cluster, id,
        [&](const auto& j) {
          return Ended(j) || (StragglerWorker(j) == slowed && Holdback(j) > 0.2);
        },
        seconds(180));
    ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
    ASSERT_EQ(StragglerWorker(job), slowed) << job.dump(2);
    const nlohmann::json& straggler = job["straggler"];
    EXPECT_GT(Holdback(job), 0.2) << job.dump(2);
    EXPECT_LE(Holdback(job), 1.0) << job.dump(2);
    // Its rank is the one the job lists it at.
    const int64_t rank = straggler.value("rank", int64_t{-1});
    ASSERT_GE(rank, 0);
    ASSERT_LT(rank, static_cast<int64_t>(job["workers"].size())) << job.dump(2);
    EXPECT_EQ(job["workers"][rank].get<std::string>(), slowed) << job.dump(2);
    EXPECT_GT(straggler.value("compute_seconds_per_step", 0.0), straggler.value("median_compute_seconds_per_step", 0.0))
        << job.dump(2);
    EXPECT_GT(straggler.value("others_wait_seconds_per_step", 0.0), 0.0) << job.dump(2);
    EXPECT_EQ(Field(job, "generation"), generation) << "the slowdown re-formed the job: " << job.dump(2);

    // The text of `herd status` says it too (polled: each report refreshes it).
    const std::string line = "Slowest rank:";
    const std::string who = std::to_string(rank) + " (" + slowed + ")";
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      text = cluster.Herd({"status", id}).out;
      const size_t at = text.find(line);
      if (at != std::string::npos && text.find(who, at) == text.find_first_not_of(' ', at + line.size())) break;
      std::this_thread::sleep_for(milliseconds(100));
    }
    const size_t at = text.find(line);
    ASSERT_NE(at, std::string::npos) << text;
    EXPECT_EQ(text.find(who, at), text.find_first_not_of(' ', at + line.size())) << text;
    EXPECT_NE(text.find("/step compute vs", at), std::string::npos) << text;
    EXPECT_NE(text.find("of a step)", at), std::string::npos) << text;
    // And the table of every rank below it marks the same one.
    const std::regex slowest_row("\n" + std::to_string(rank) + " +" + slowed + " +[0-9.]+ m?s +[0-9.]+ m?s +[0-9]+.* slowest\n");
    EXPECT_TRUE(std::regex_search(text, slowest_row)) << text;
  }  // worker-2's trainer runs freely again

  CommandResult cancel = cluster.Herd({"cancel", id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.out << cancel.err;
  job = cluster.WaitForState(id, {"CANCELLED", "SUCCEEDED", "FAILED"}, seconds(60));
  EXPECT_EQ(job.value("state", ""), "CANCELLED") << job.dump(2) << cluster.Logs();
}

// The shares of the last "batch shares re-planned" line in the logs, by rank;
// empty before the first.
std::vector<int64_t> LastReplannedShares(const std::string& logs) {
  static const std::regex replanned(R"(batch shares re-planned from the ranks' rates: \[[0-9, ]*\] -> \[([0-9, ]*)\])");
  std::vector<int64_t> shares;
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), replanned); it != std::sregex_iterator(); ++it) {
    shares.clear();
    const std::string list = (*it)[1].str();
    static const std::regex number("[0-9]+");
    for (auto n = std::sregex_iterator(list.begin(), list.end(), number); n != std::sregex_iterator(); ++n) {
      shares.push_back(std::stoll(n->str()));
    }
  }
  return shares;
}

TEST(Straggler, ThroughputSharesShrinkTheSlowWorkersShareAndKeepEverySampleOnce) {
  constexpr int64_t kSamples = 4800;  // 100 steps of 3 x 16 per epoch
  constexpr size_t kEpochs = 8;
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 3;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(
      "model: mlp\n"
      "dataset: {kind: synthetic, synthetic_samples: 4800, synthetic_features: 64}\n"
      "batch_size: 16\n"
      "epochs: 8\n"
      "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
      "sync: {shares: throughput}\n"
      "log_interval_steps: 10\n"
      "collective_timeout_seconds: 30\n"
      "seed: 7\n"
      "min_workers: 3\n"
      "max_workers: 3\n");
  auto job = WaitForJob(
      cluster, id, [](const auto& j) { return Ended(j) || Field(j, "world_size") == 3; }, seconds(180));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  // The generation is formed once its members are named; worker-2's trainer
  // may still be starting.
  std::vector<pid_t> trainer;
  for (const auto deadline = std::chrono::steady_clock::now() + seconds(60);
       trainer.empty() && std::chrono::steady_clock::now() < deadline;) {
    trainer = TrainerPids(cluster, 2);
    if (trainer.empty()) std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_EQ(trainer.size(), 1u) << cluster.Logs();
  int64_t slowed_rank = -1;
  for (size_t r = 0; r < job["workers"].size(); ++r) {
    if (job["workers"][r].get<std::string>() == cluster.worker_id(2)) slowed_rank = static_cast<int64_t>(r);
  }
  ASSERT_GE(slowed_rank, 0) << job.dump(2);

  std::vector<int64_t> shares;
  nlohmann::json ranks;  // `herd status`'s per-rank view
  auto status_share = [&](int64_t rank) {
    return ranks.is_array() && ranks.size() == 3 ? ranks[rank].value("batch_share", int64_t{-1}) : int64_t{-1};
  };
  {
    DutyCycle slow(trainer[0], 0.3, milliseconds(30));
    // Polled until rank 0 re-plans with the slowed rank below an equal
    // share, and `herd status` shows it, or the job ends.
    const auto deadline = std::chrono::steady_clock::now() + seconds(180);
    while (std::chrono::steady_clock::now() < deadline) {
      shares = LastReplannedShares(cluster.Logs());
      const nlohmann::json status = cluster.HerdJson({"status", id});
      ranks = status.value("ranks", nlohmann::json());
      const int64_t shown = status_share(slowed_rank);
      if (shares.size() == 3 && shares[slowed_rank] < 16 && shown >= 0 && shown < 16) break;
      if (Ended(status)) break;
      std::this_thread::sleep_for(milliseconds(200));
    }
  }  // worker-2's trainer runs freely again
  ASSERT_EQ(shares.size(), 3u) << cluster.Logs();
  // `herd status` lists every rank by its worker, with the plan in force.
  ASSERT_TRUE(ranks.is_array() && ranks.size() == 3) << ranks.dump(2);
  int64_t shown_total = 0;
  for (int64_t r = 0; r < 3; ++r) {
    shown_total += status_share(r);
    EXPECT_EQ(ranks[r].value("worker_id", ""), job["workers"][r].get<std::string>()) << ranks.dump(2);
    EXPECT_GT(ranks[r].value("compute_seconds_per_step", 0.0), 0.0) << ranks.dump(2);
    if (r == slowed_rank) {
      EXPECT_LT(status_share(r), 16) << ranks.dump(2);
    } else {
      EXPECT_GT(status_share(r), 16) << ranks.dump(2);
    }
  }
  EXPECT_EQ(shown_total, 48) << ranks.dump(2);
  EXPECT_EQ(shares[0] + shares[1] + shares[2], 48) << "the step's size changed";
  // What the re-plans were made from: rank 0's split of every rank's step at each commit point.
  static const std::regex split(
      R"(compute/wait per step and samples per step of each rank since the last commit: )"
      R"(rank 0 [0-9.]+/[0-9.]+ s \([0-9]+\), rank 1 [0-9.]+/[0-9.]+ s \([0-9]+\), rank 2 [0-9.]+/[0-9.]+ s \([0-9]+\))");
  EXPECT_TRUE(std::regex_search(cluster.Logs(), split)) << cluster.Logs();
  EXPECT_LT(shares[slowed_rank], 16) << cluster.Logs();
  for (int64_t r = 0; r < 3; ++r) {
    if (r != slowed_rank) {
      EXPECT_GT(shares[r], 16) << "rank " << r;
    }
  }

  job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED", "CANCELLED"}, seconds(600));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "step"), static_cast<int64_t>(kEpochs) * 100) << "steps per epoch changed";
  ExpectEachSampleOnce(ledger_dir, kEpochs, kSamples, id);
}

}  // namespace
}  // namespace herd::testing
