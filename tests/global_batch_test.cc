// global_batch_size through real trainer processes: the step's
// size, and so the optimizer's view, does not depend on the world size. The
// same job at 2 and 3 workers ends with bitwise the parameters of one worker
// where the micro-batches are the same (the sums then run in the same order),
// and a run that loses a worker and gets one back ends where an
// uninterrupted run ends (to float rounding: the sums over ranks are split
// differently), with every sample trained exactly once per epoch.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/harness/final_model.h"
#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "worker/train/batches/sample_ledger.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

// The largest absolute difference between two models' tensors.
double MaxDifference(const SavedModel& a, const SavedModel& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [name, value] : a) {
    if (!b.count(name)) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    worst = std::max(worst, MaxAbsDifference(value, b.at(name)));
  }
  return worst;
}

// The worker folder holding the job's final model (the one-worker job's).
std::string FinalModelDir(LocalCluster& cluster, int workers, const std::string& id) {
  for (int i = 0; i < workers; ++i) {
    if (std::filesystem::exists(cluster.job_dir(i, id) + "/model-final.pt")) return cluster.job_dir(i, id);
  }
  return "";
}

std::string GlobalBatchJob(int workers, int batch) {
  return "model: mlp\n"
         "dataset: {kind: idx, path: " + std::string(kFashionMnist) + "}\n"
         "batch_size: " + std::to_string(batch) + "\n"
         "global_batch_size: 48\n"
         "max_steps: 25\n"
         "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
         "eval: {max_samples: 200}\n"
         "seed: 42\n"
         "min_workers: " + std::to_string(workers) + "\nmax_workers: " + std::to_string(workers) + "\n";
}

// With global_batch_size 48, batch_size 16 gives 3 workers one micro-batch
// of 16 each and one worker three, batch_size 24 gives 2 workers one of 24
// each and one worker two: each pair sums the same gradients in the same
// order (the all-reduce in rank order, one worker in micro-batch order), so
// each pair is bitwise equal. (Different splits, say 2 x (16 + 8) against
// 3 x 16, differ by float rounding, which a ReLU kink taken on one side only
// can amplify: the elastic test below compares those.)
TEST(GlobalBatch, TwoAndThreeWorkersTrainBitwiseTheStepsOfOne) {
  if (!std::filesystem::exists(kFashionMnist)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  ClusterOptions options;
  options.workers = 3;
  LocalCluster cluster(options);
  for (const auto& [workers, batch] : std::vector<std::pair<int, int>>{{3, 16}, {2, 24}}) {
    std::map<int, SavedModel> models;
    for (int world : {workers, 1}) {
      const std::string id = cluster.Submit(GlobalBatchJob(world, batch));
      const auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(300));
      ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
      EXPECT_EQ(Field(job, "step"), 25);
      EXPECT_EQ(Field(job, "world_size"), world);
      const std::string dir = FinalModelDir(cluster, 3, id);
      ASSERT_FALSE(dir.empty()) << cluster.Logs();
      models[world] = LoadFinalModel(dir);
      ASSERT_FALSE(models[world].empty());
    }
    EXPECT_TRUE(DifferingTensors(models[workers], models[1]).empty())
        << workers << " workers at batch_size " << batch << " vs 1: largest difference "
        << MaxDifference(models[workers], models[1]);
  }
}

constexpr int64_t kSamples = 9600;  // 200 steps of 48 per epoch

// Plain SGD at a small rate: rounding differences stay at rounding size. (At
// lr 0.05 with momentum 0.9 this random-label task is chaotic: two
// uninterrupted runs at 2 and 3 workers differ by 0.1 after 400 steps.)
std::string ElasticJob(int min_workers) {
  return "model: mlp\n"
         "dataset: {kind: synthetic, synthetic_samples: 9600, synthetic_features: 64}\n"
         "batch_size: 16\n"
         "global_batch_size: 48\n"
         "epochs: 2\n"
         "optimizer: {name: sgd, lr: 0.01}\n"
         "log_interval_steps: 5\n"
         "collective_timeout_seconds: 5\n"
         "seed: 11\n"
         "min_workers: " + std::to_string(min_workers) + "\nmax_workers: 3\n";
}

TEST(GlobalBatch, LosingAWorkerAndGettingOneBackEndsWhereAnUninterruptedRunEnds) {
  const std::string ledger_dir = NewLedgerDir();
  ClusterOptions options;
  options.workers = 3;
  options.lease_seconds = 3;
  options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir};
  LocalCluster cluster(options);

  // Uninterrupted: 3 workers throughout.
  const std::string steady = cluster.Submit(ElasticJob(3));
  auto job = cluster.WaitForState(steady, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "step"), 400);

  // Elastic: 3 workers, then 2 after a kill, then 3 again with a replacement.
  const std::string elastic = cluster.Submit(ElasticJob(2));
  job = WaitForJob(
      cluster, elastic,
      [](const auto& j) {
        const std::string state = j.value("state", "");
        return (state != "PENDING" && state != "RUNNING") || (state == "RUNNING" && Field(j, "step") >= 30);
      },
      seconds(120));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2);
  SignalWorker(cluster, 2, SIGKILL);
  const int64_t step_at_kill = Field(cluster.HerdJson({"status", elastic}), "step");
  job = WaitForProgressOn(cluster, elastic, 2, step_at_kill, seconds(60)).first;
  ASSERT_EQ(job.value("state", ""), "RUNNING") << "the job ended before it trained on 2 workers: " << job.dump(2);
  ASSERT_EQ(Field(job, "world_size"), 2) << job.dump(2) << cluster.Logs();
  // The survivors wait (stopped) until they are asked to re-form for the
  // replacement, so the job cannot end before it joins.
  bool replacement_up = false;
  const bool reform_asked = HoldTrainersUntilReformAsked(
      cluster, elastic, {0, 1}, Field(job, "generation"),
      [&] {
        cluster.StartWorker(3);
        return replacement_up = cluster.WaitForAliveWorkers(3, seconds(60));
      },
      seconds(60));
  ASSERT_TRUE(replacement_up) << cluster.Logs();
  ASSERT_TRUE(reform_asked) << "no re-form was asked for the replacement: " << cluster.Logs();
  const int64_t step_on_two = Field(cluster.HerdJson({"status", elastic}), "step");
  job = WaitForProgressOn(cluster, elastic, 3, step_on_two, seconds(60)).first;
  ASSERT_EQ(job.value("state", ""), "RUNNING") << "the job ended before the replacement trained: " << job.dump(2);
  ASSERT_EQ(Field(job, "world_size"), 3) << job.dump(2) << cluster.Logs();
  job = cluster.WaitForState(elastic, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "step"), 400) << "the number of steps depends on the world size";

  const LedgerReplay replay = ExpectEachSampleOnce(ledger_dir, 2, kSamples, elastic);
  EXPECT_GE(replay.generation_start_step.size(), 3u) << "3 workers, then 2, then 3 again";
  // Float rounding only: the world size changed how the sums were split
  // (measured: 1.7e-5, as between uninterrupted runs at 2 and 3 workers).
  const double difference =
      MaxDifference(LoadFinalModel(cluster.job_dir(0, steady)), LoadFinalModel(cluster.job_dir(0, elastic)));
  std::cerr << "largest parameter difference, elastic vs uninterrupted: " << difference << "\n";
  EXPECT_LE(difference, 1e-4);
}

}  // namespace
}  // namespace herd::testing
