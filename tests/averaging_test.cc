// Sync mode `average` end to end on small synthetic jobs: the trainer's
// schedule of warmup, rounds, evaluations and commits, plain and streaming.
// Accuracy and bytes against all-reduce on Fashion-MNIST are checked in
// convergence_test, beside the demo job they share.
#include <gtest/gtest.h>

#include "tests/harness/local_cluster.h"

namespace herd::testing {
namespace {

using std::chrono::minutes;

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
    // Two ranks gather their int8 rounds (round_shape.h): one hop, same bytes.
    EXPECT_NE(log.find("; int8 rounds gather"), std::string::npos) << log;
  }
}

// Delayed merges (overlap_steps 3, Streaming DiLoCo's tau) with 4
// fragments of `every` 8 (phases 2, 4, 6, 0) and the int8 wire, whose scale
// exchange then overlaps a step. Local steps 11-40 (L counts from the last
// full sync); a round lands 3 steps after its launch, in launch order, and
// full syncs (evaluations at 15 and 30, the end at 40) first land every
// round in flight. Counted: 15 lands 12's (1), drains 14's (2), full (3);
// launches 17, 19, 21, 23, 25, 27, 29 land at 20, 22, 24, 26, 28, 30 (4-9);
// 30 drains 29's (10), full (11); launches 32, 34, 36, 38 land at 35, 37,
// 39 (12-14); 40 drains 38's (15), full (16).
TEST(Averaging, DelayedMergesLandTauStepsAfterLaunch) {
  LocalCluster cluster;
  const std::string id = cluster.Submit(
      "model: mlp\n"
      "dataset: {kind: synthetic}\n"
      "batch_size: 16\n"
      "max_steps: 40\n"
      "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
      "sync: {mode: average, every: 8, fragments: 4, overlap_steps: 3, compression: int8, warmup_steps: 10,\n"
      "       outer: {kind: nesterov, lr: 0.7, momentum: 0.9}}\n"
      "eval: {interval_steps: 15, max_samples: 256}\n"
      "log_interval_steps: 5\n"
      "min_workers: 2\nmax_workers: 2\nseed: 3\n");
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED", "CANCELLED"}, minutes(5));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(job.value("step", 0), 40);
  for (int w = 0; w < 2; ++w) {
    const std::string log = ReadFile(cluster.job_dir(w, id) + "/trainer.log");
    EXPECT_NE(log.find("merged 3 step(s) after launch"), std::string::npos) << log;
    EXPECT_NE(log.find("averaging: 16 rounds"), std::string::npos) << log;
    EXPECT_NE(log.find("30 local steps, 10 all-reduce steps"), std::string::npos) << log;
    EXPECT_NE(log.find("replicas verified bitwise"), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace herd::testing
