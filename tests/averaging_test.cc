// Sync mode `average` end to end. First: 2 real workers train mnist_cnn on
// Fashion-MNIST once with gradient all-reduce and once with parameter
// averaging every 8 steps. Averaging must reach the all-reduce run's test
// accuracy within 1.5 points while all-reducing at least 6x fewer bytes.
//
// Reduced configuration, to fit CI (2 shared cores, 0.3-0.7 s per step, so
// 2 x 2 epochs would take 10-20 minutes): both runs use the 2-epoch job but
// stop with max_steps at the end of the first epoch (469 steps of 128
// samples: the whole training set once). The cosine schedule spans
// min(epochs * steps per epoch, max_steps), so this is the 1-epoch schedule.
// Evaluation uses the full 10,000-sample test set. The thresholds are the
// issue's, unchanged. HERD_AVERAGING_EPOCHS=2 (bazel test
// --test_env=HERD_AVERAGING_EPOCHS=2) runs the full 2 epochs.
//
// Bytes are herd's own figures: each trainer logs its total at the end
// ("all-reduce: ... B bytes sent" / "averaging: R rounds, B bytes sent"),
// counted as buffer bytes handed to all-reduce in both modes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <regex>

#include "tests/harness/local_cluster.h"

namespace herd::testing {
namespace {

using std::chrono::minutes;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";
constexpr int kStepsPerEpoch = (60000 + 127) / 128;  // 2 workers x batch 64
constexpr int kEvery = 8;

int EpochsTrained() {
  const char* value = std::getenv("HERD_AVERAGING_EPOCHS");
  return value != nullptr && std::string(value) == "2" ? 2 : 1;
}

std::string CnnJob(const std::string& sync) {
  return "model: mnist_cnn\n"
         "dataset: {kind: idx, path: " + std::string(kFashionMnist) + "}\n"
         "batch_size: 64\n"
         "epochs: 2\n"
         "max_steps: " + std::to_string(kStepsPerEpoch * EpochsTrained()) + "\n"
         "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
         "schedule: {name: cosine, warmup_steps: 20}\n"
         "sync: " + sync + "\n"
         "min_workers: 2\nmax_workers: 2\n"
         "seed: 1\n"
         "log_interval_steps: 10\n";
}

struct Traffic {
  int64_t rounds = -1;  // averaging only
  int64_t bytes = -1;
  double bytes_per_sample = -1;
};

// The trainer's end-of-training summary line for its sync mode.
Traffic ParseTraffic(const std::string& log, bool averaging) {
  static const std::regex allreduce(R"(all-reduce: (\d+) steps, (\d+) bytes sent \(([0-9.]+) bytes/sample\))");
  static const std::regex average(R"(averaging: (\d+) rounds, (\d+) bytes sent \(([0-9.]+) bytes/sample\))");
  std::smatch m;
  Traffic t;
  if (!std::regex_search(log, m, averaging ? average : allreduce)) return t;
  if (averaging) t.rounds = std::stoll(m[1]);
  t.bytes = std::stoll(m[2]);
  t.bytes_per_sample = std::stod(m[3]);
  return t;
}

struct RunResult {
  double accuracy = -1;
  Traffic traffic[2];  // per worker
};

RunResult TrainAndRead(LocalCluster& cluster, const std::string& sync, bool averaging) {
  RunResult run;
  const auto start = std::chrono::steady_clock::now();
  const std::string id = cluster.Submit(CnnJob(sync));
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED", "CANCELLED"}, minutes(20));
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(job.value("step", 0), kStepsPerEpoch * EpochsTrained());
  EXPECT_EQ(job.value("epoch", 0), EpochsTrained());
  if (job.contains("eval") && job["eval"].contains("accuracy")) run.accuracy = job["eval"]["accuracy"].get<double>();
  for (int w = 0; w < 2; ++w) {
    const std::string log = ReadFile(cluster.job_dir(w, id) + "/trainer.log");
    run.traffic[w] = ParseTraffic(log, averaging);
    // The final bitwise check passed, right after the last round.
    EXPECT_NE(log.find("replicas verified bitwise"), std::string::npos) << "worker " << w;
  }
  std::cout << "sync " << sync << ": accuracy " << run.accuracy << ", " << run.traffic[0].bytes << " bytes ("
            << run.traffic[0].bytes_per_sample << " bytes/sample) by worker 0, "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s\n";
  return run;
}

TEST(Averaging, EveryEightStepsMatchesAllReduceAccuracyWithSixTimesFewerBytes) {
  if (!std::filesystem::exists(kFashionMnist)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  LocalCluster cluster;
  const RunResult allreduce = TrainAndRead(cluster, "{mode: allreduce}", false);
  const RunResult average = TrainAndRead(cluster, "{mode: average, every: " + std::to_string(kEvery) + "}", true);

  ASSERT_GT(allreduce.accuracy, 0);
  ASSERT_GT(average.accuracy, 0);
  EXPECT_GE(average.accuracy, allreduce.accuracy - 0.015);
  for (int w = 0; w < 2; ++w) {
    ASSERT_GT(allreduce.traffic[w].bytes, 0) << "worker " << w;
    ASSERT_GT(average.traffic[w].bytes, 0) << "worker " << w;
    // One round per kEvery local steps, plus one closing each epoch (469 is
    // not a multiple of 8).
    EXPECT_EQ(average.traffic[w].rounds, EpochsTrained() * ((kStepsPerEpoch + kEvery - 1) / kEvery)) << "worker " << w;
    EXPECT_GE(static_cast<double>(allreduce.traffic[w].bytes) / average.traffic[w].bytes, 6.0) << "worker " << w;
    EXPECT_GE(allreduce.traffic[w].bytes_per_sample / average.traffic[w].bytes_per_sample, 6.0) << "worker " << w;
  }
}

// The trainer's schedule in mode average, on a small synthetic job: warmup
// steps all-reduce gradients, then rounds fall every `every` local steps and
// also at each evaluation step and the last step. Commit points (replica hash
// checks every log_interval_steps) only land on rounds, so a job that
// succeeds passed every check; a commit between rounds would fail it.
TEST(Averaging, WarmupThenNesterovRoundsAlignWithEvaluationAndCommits) {
  LocalCluster cluster;
  const std::string id = cluster.Submit(
      "model: mlp\n"
      "dataset: {kind: synthetic}\n"
      "batch_size: 16\n"
      "max_steps: 30\n"
      "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
      "sync: {mode: average, every: 4, warmup_steps: 10, outer: {kind: nesterov, lr: 0.7, momentum: 0.9}}\n"
      "eval: {interval_steps: 7, max_samples: 256}\n"
      "log_interval_steps: 5\n"
      "min_workers: 2\nmax_workers: 2\nseed: 3\n");
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED", "CANCELLED"}, minutes(5));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(job.value("step", 0), 30);
  for (int w = 0; w < 2; ++w) {
    const std::string log = ReadFile(cluster.job_dir(w, id) + "/trainer.log");
    // Steps 1-10 all-reduce; local steps 11-30 average at 14 and 18 (every
    // 4), 21 (evaluation), 25 (every 4), 28 (evaluation) and 30 (the end).
    EXPECT_NE(log.find("averaging: 6 rounds"), std::string::npos) << log;
    EXPECT_NE(log.find("20 local steps, 10 all-reduce steps"), std::string::npos) << log;
    EXPECT_NE(log.find("replicas verified bitwise"), std::string::npos) << log;
  }
}

// Streaming averaging on the same small job: 2 fragments of `every` 4
// (phases 2 and 0), overlapped rounds and the int8 wire. Counted as rounds:
// each overlapped round when it lands (a step after its launch) and each
// full sync (evaluation, end). Local steps 11-30: launch 12 / land 13,
// full 14 (evaluation), 16/17, 18/19, 20 / land 21 before the full sync at
// 21 (evaluation), 23/24, 25/26, 27 / land 28 before the full 28
// (evaluation), full 30 (the end): 11. Replica-hash checks every 5 steps
// can only fall on full syncs; the job succeeding means each passed.
TEST(Averaging, StreamingFragmentsOverlapInt8FollowTheirSchedule) {
  LocalCluster cluster;
  const std::string id = cluster.Submit(
      "model: mlp\n"
      "dataset: {kind: synthetic}\n"
      "batch_size: 16\n"
      "max_steps: 30\n"
      "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
      "sync: {mode: average, every: 4, fragments: 2, overlap: true, compression: int8, warmup_steps: 10,\n"
      "       outer: {kind: nesterov, lr: 0.7, momentum: 0.9}}\n"
      "eval: {interval_steps: 7, max_samples: 256}\n"
      "log_interval_steps: 5\n"
      "min_workers: 2\nmax_workers: 2\nseed: 3\n");
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED", "CANCELLED"}, minutes(5));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(job.value("step", 0), 30);
  for (int w = 0; w < 2; ++w) {
    const std::string log = ReadFile(cluster.job_dir(w, id) + "/trainer.log");
    EXPECT_NE(log.find("in 2 staggered fragments"), std::string::npos) << log;
    EXPECT_NE(log.find("averaging: 11 rounds"), std::string::npos) << log;
    EXPECT_NE(log.find("20 local steps, 10 all-reduce steps"), std::string::npos) << log;
    EXPECT_NE(log.find("replicas verified bitwise"), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace herd::testing
