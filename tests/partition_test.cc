// Network partitions on a testbed (tests/testbed): each process on its own
// host, links cut for two leases mid-job and restored. A worker cut off is
// left out, then re-admitted with the trainer (and job context) it kept; a
// coordinator cut off from every worker costs no committed step.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/testbed_cluster.h"
#include "tests/testbed/testbed.h"
#include "worker/train/batches/sample_ledger.h"

namespace herd::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

constexpr double kLease = 3;
constexpr int64_t kSamples = 24000;

std::string JobSpec(int64_t min_workers, int64_t max_workers) {
  return "model: mlp\n"
         "dataset: {kind: synthetic, synthetic_samples: " + std::to_string(kSamples) + ", synthetic_features: 64}\n"
         "batch_size: 16\n"
         "epochs: 2\n"
         "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
         "log_interval_steps: 5\n"
         "collective_timeout_seconds: 4\n"
         "seed: 7\n"
         "min_workers: " + std::to_string(min_workers) + "\nmax_workers: " + std::to_string(max_workers) + "\n";
}

// Polls `herd status` for one job over the whole test, failing it if the
// committed step ever moves backwards. A poll that fails (the coordinator is
// cut off) is skipped: only answers count.
class StepWatch {
 public:
  StepWatch(LocalCluster& cluster, std::string id) : cluster_(cluster), id_(std::move(id)) {}

  // Polls until `done(job)` or the job leaves RUNNING, or until no answer
  // has shown a higher step for `stall` (a slower machine trains slower, so
  // the limit is on stalling, not on the whole wait); returns the last
  // answer.
  nlohmann::json Until(const std::function<bool(const nlohmann::json&)>& done, seconds stall) {
    auto deadline = Clock::now() + stall;
    int64_t progressed_to = -1;
    while (Clock::now() < deadline) {
      if (auto job = Poll()) {
        last_ = *job;
        const std::string state = job->value("state", "");
        if ((state != "RUNNING" && state != "PENDING") || done(*job)) break;
        if (Field(*job, "step") > progressed_to) {
          progressed_to = Field(*job, "step");
          deadline = Clock::now() + stall;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return last_;
  }

  // One poll, if the coordinator answered.
  std::optional<nlohmann::json> Poll() {
    CommandResult result = cluster_.Herd({"status", id_, "-o", "json"}, seconds(5));
    if (result.exit_code != 0) {
      ++failed_;
      return std::nullopt;
    }
    nlohmann::json job;
    try {
      job = nlohmann::json::parse(result.out);
    } catch (const std::exception&) {
      ++failed_;
      return std::nullopt;
    }
    const int64_t step = Field(job, "step");
    EXPECT_GE(step, highest_) << "a committed step was lost: " << job.dump(2);
    highest_ = std::max(highest_, step);
    ++answered_;
    return job;
  }

  int failed() const { return failed_; }
  int answered() const { return answered_; }

 private:
  LocalCluster& cluster_;
  std::string id_;
  nlohmann::json last_;
  int64_t highest_ = 0;
  int failed_ = 0;
  int answered_ = 0;
};

// Holds until `since` + two leases.
void HoldTwoLeases(Clock::time_point since) {
  std::this_thread::sleep_until(since + std::chrono::milliseconds(static_cast<int64_t>(2 * kLease * 1000)));
}

std::unique_ptr<testbed::Testbed> NewTestbed(int hosts) {
  testbed::TestbedOptions options;
  options.hosts = hosts;
  auto created = testbed::Testbed::Create(options);
  // Not a skip: CI runs as root, so a testbed that cannot be made is a failure.
  EXPECT_TRUE(created.ok()) << created.status();
  return created.ok() ? std::move(*created) : nullptr;
}

// One worker's host is cut off for two leases: the other two train on as a
// generation of two; when the link returns, the worker is re-admitted with
// the same trainer process (no reload), which heals from a member's commit.
TEST(Partition, WorkerCutOffForTwoLeasesIsReadmittedWithItsTrainer) {
  auto bed = NewTestbed(3);  // declared first: outlives the cluster's processes
  ASSERT_NE(bed, nullptr);
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options = ClusterOnTestbed(*bed);
  options.lease_seconds = kLease;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);
  StepWatch watch(cluster, cluster.Submit(JobSpec(2, 3)));

  auto job = watch.Until([](const auto& j) { return Field(j, "world_size") == 3 && Field(j, "step") >= 30; },
                         seconds(60));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  const std::string id = job.value("id", "");
  const std::vector<pid_t> trainer = TrainerPids(cluster, 2);
  ASSERT_EQ(trainer.size(), 1u);
  const int64_t first_generation = Field(job, "generation");

  const auto cut_at = Clock::now();
  ASSERT_TRUE(bed->Cut(2).ok());
  // The other two go on without it.
  job = watch.Until([&](const auto& j) { return Field(j, "generation") > first_generation && Field(j, "world_size") == 2; },
                    seconds(30));
  ASSERT_EQ(Field(job, "world_size"), 2) << job.dump(2) << cluster.Logs();
  const int64_t without = Field(job, "generation");
  const int64_t step_without = Field(job, "step");
  job = watch.Until([&](const auto& j) { return Field(j, "step") > step_without + 10; }, seconds(30));
  ASSERT_GT(Field(job, "step"), step_without + 10) << "no progress on two workers: " << job.dump(2) << cluster.Logs();
  ASSERT_EQ(Field(job, "generation"), without) << job.dump(2);
  HoldTwoLeases(cut_at);
  ASSERT_TRUE(bed->Restore(2).ok());

  // Re-admitted: a later generation with all three again.
  job = watch.Until([&](const auto& j) { return Field(j, "generation") > without && Field(j, "world_size") == 3; },
                    seconds(40));
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  EXPECT_EQ(TrainerPids(cluster, 2), trainer) << "the cut-off worker's trainer was restarted";

  job = watch.Until([](const auto&) { return false; }, seconds(120));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "step"), Field(job, "total_steps"));
  const std::string log = ReadFile(cluster.job_dir(2, id) + "/trainer.log");
  EXPECT_EQ(Count(log, "job context loaded"), 1) << log;
  EXPECT_NE(log.find("healed from rank"), std::string::npos) << log;
  ExpectEachSampleOnce(ledger_dir, 2, kSamples);
}

// The coordinator's host is cut off from every worker for two leases: the
// workers train on among themselves, the coordinator sees every lease lapse,
// and when the link returns the job takes its workers back with the commits
// their trainers kept. The committed step never goes back.
TEST(Partition, CoordinatorCutOffForTwoLeasesLosesNoCommittedStep) {
  auto bed = NewTestbed(3);
  ASSERT_NE(bed, nullptr);
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 2;
  options.lease_seconds = kLease;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  options.coordinator_host = bed->host(0).address;
  options.coordinator_exec_prefix = bed->ExecPrefix(0);
  for (int i = 1; i < 3; ++i) options.worker_hosts.push_back({bed->host(i).address, bed->ExecPrefix(i)});
  LocalCluster cluster(options);
  StepWatch watch(cluster, cluster.Submit(JobSpec(2, 2)));

  auto job = watch.Until([](const auto& j) { return Field(j, "world_size") == 2 && Field(j, "step") >= 30; },
                         seconds(60));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  ASSERT_GE(Field(job, "step"), 30) << job.dump(2) << cluster.Logs();
  const std::string id = job.value("id", "");
  const int64_t step_at_cut = Field(job, "step");

  const auto cut_at = Clock::now();
  ASSERT_TRUE(bed->Cut(0).ok());
  HoldTwoLeases(cut_at);
  const int failed_before = watch.failed();
  EXPECT_FALSE(watch.Poll().has_value()) << "the coordinator answered while cut off";
  EXPECT_GT(watch.failed(), failed_before);
  ASSERT_TRUE(bed->Restore(0).ok());

  // Polls from here on must be answered again; the job ends with every step.
  job = watch.Until([](const auto&) { return false; }, seconds(120));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "step"), Field(job, "total_steps"));
  EXPECT_GT(Field(job, "step"), step_at_cut);
  // The workers' trainers trained through the cut: nobody restarted them.
  for (int i = 0; i < 2; ++i) {
    const std::string log = ReadFile(cluster.job_dir(i, id) + "/trainer.log");
    EXPECT_EQ(Count(log, "job context loaded"), 1) << "worker " << i << ":\n" << log;
  }
  ExpectEachSampleOnce(ledger_dir, 2, kSamples);
}

}  // namespace
}  // namespace herd::testing
