// A model that is wrong fails its job at once, naming why, with real worker
// processes and real Gloo: every retry would fail alike, so it spends none
// of the restart budget, and the reason is herd's (the model, the step, what
// it returned against what was expected), not LibTorch's. A member that
// dies is still a fault to retry.
#include <gtest/gtest.h>
#include <signal.h>

#include <vector>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/scripted_models.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

// Steps of a job that must still be training when a test kills a trainer.
constexpr int64_t kLongJobSteps = 20000;

std::string Job(const std::string& model_path, int classes, int min_workers, int64_t max_steps) {
  return "model: {name: torchscript, path: " + model_path +
         "}\n"
         "dataset: {kind: synthetic, synthetic_samples: 4000, synthetic_features: 16, synthetic_classes: " +
         std::to_string(classes) +
         "}\n"
         "batch_size: 8\n"
         "max_steps: " +
         std::to_string(max_steps) +
         "\n"
         "log_interval_steps: 4\n"
         "eval: {max_samples: 64}\n"
         "restart_budget: 5\n"
         "collective_timeout_seconds: 5\n"
         "min_workers: " +
         std::to_string(min_workers) + "\nmax_workers: 2\n";
}

nlohmann::json RunToEnd(LocalCluster& cluster, const std::string& yaml) {
  const std::string id = cluster.Submit(yaml);
  return cluster.WaitForState(id, {"FAILED", "SUCCEEDED"}, seconds(120));
}

TEST(ModelError, LogitsThatDoNotFitTheClassesFailTheFirstGenerationNamingBoth) {
  LocalCluster cluster;
  auto job = RunToEnd(cluster, Job(WriteThreeClassModel(cluster.root()), 10, 2, 12));
  ASSERT_EQ(job.value("state", ""), "FAILED") << job.dump(2) << cluster.Logs();
  const std::string reason = job.value("reason", "");
  EXPECT_NE(reason.find("training step 1 (model torchscript): model returned logits of shape [8, 3]; the dataset "
                        "has 10 classes"),
            std::string::npos)
      << reason;
  EXPECT_EQ(reason.find("out of bounds"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("restart budget"), std::string::npos) << reason;
  EXPECT_EQ(Field(job, "generation"), 1) << "a model error is the job's, not a failure to retry: " << job.dump(2);
}

TEST(ModelError, ForwardThatRaisesFailsTheFirstGenerationWithItsMessage) {
  LocalCluster cluster;
  auto job = RunToEnd(cluster, Job(WriteRaisingModel(cluster.root(), "labels must be sorted"), 4, 2, 12));
  ASSERT_EQ(job.value("state", ""), "FAILED") << job.dump(2) << cluster.Logs();
  const std::string reason = job.value("reason", "");
  EXPECT_NE(reason.find("training step 1 (model torchscript): forward raised: "), std::string::npos) << reason;
  EXPECT_NE(reason.find("labels must be sorted"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("Traceback"), std::string::npos) << reason;
  EXPECT_EQ(Field(job, "generation"), 1) << job.dump(2);
}

// The same scripted model on data it fits trains; a trainer killed on the
// way is a member failure: the job goes on in a later generation. The
// model is tiny (400 steps take 0.2 s here), so the job is long enough that
// the kill lands while it trains on any machine, reporting progress rarely.
TEST(ModelError, KilledTrainerIsStillAFailureToRetry) {
  LocalCluster cluster;
  std::string yaml = Job(WriteThreeClassModel(cluster.root()), 3, 1, kLongJobSteps);
  yaml.replace(yaml.find("log_interval_steps: 4"), std::string("log_interval_steps: 4").size(),
               "log_interval_steps: 100");
  const std::string id = cluster.Submit(yaml);
  auto job = WaitForJob(cluster, id, [](const auto& j) { return Field(j, "step") >= 8; }, seconds(120));
  ASSERT_EQ(job.value("state", ""), "RUNNING") << job.dump(2) << cluster.Logs();
  ASSERT_EQ(Field(job, "world_size"), 2) << job.dump(2);
  const std::vector<pid_t> trainers = TrainerPids(cluster, 1);
  ASSERT_FALSE(trainers.empty()) << cluster.Logs();
  for (pid_t pid : trainers) ASSERT_EQ(::kill(pid, SIGKILL), 0);
  job = cluster.WaitForState(id, {"FAILED", "SUCCEEDED"}, seconds(180));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_GE(Field(job, "generation"), 2) << job.dump(2);
  EXPECT_EQ(Field(job, "step"), kLongJobSteps);
}

}  // namespace
}  // namespace herd::testing
