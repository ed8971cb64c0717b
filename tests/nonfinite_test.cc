// A diverging job is stopped, not trained on (on_nonfinite), with real
// worker processes and real Gloo: by default it fails with a reason naming
// the step and the value; with on_nonfinite: skip_step a bad batch's step
// is dropped on every rank alike, counted, and shown as the job's warning,
// and the job trains on to a bitwise-identical end (the trainers verify
// their replicas bitwise before they succeed). A model with nothing to
// train fails at once, saying so.
#include <gtest/gtest.h>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/scripted_models.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

std::string Job(const std::string& model, const std::string& on_nonfinite) {
  return "model: " + model +
         "\n"
         "dataset: {kind: synthetic, synthetic_samples: 2000, synthetic_features: 16, synthetic_classes: 4}\n"
         "batch_size: 8\n"
         "max_steps: 12\n"
         "log_interval_steps: 4\n"
         "eval: {max_samples: 64}\n" +
         (on_nonfinite.empty() ? "" : "on_nonfinite: " + on_nonfinite + "\n") +
         "min_workers: 2\nmax_workers: 2\n";
}

TEST(NonFinite, DivergingJobFailsNamingTheStepAndTheValue) {
  LocalCluster cluster;
  // lr 1e30: the first update throws the parameters so far that the next
  // loss overflows.
  const std::string id = cluster.Submit(Job("mlp\noptimizer: {name: sgd, lr: 1.0e+30}", ""));
  auto job = cluster.WaitForState(id, {"FAILED", "SUCCEEDED"}, seconds(180));
  ASSERT_EQ(job.value("state", ""), "FAILED") << job.dump(2) << cluster.Logs();
  const std::string reason = job.value("reason", "");
  EXPECT_NE(reason.find("training diverged: the loss of step "), std::string::npos) << reason;
  EXPECT_TRUE(reason.find(" is nan") != std::string::npos || reason.find(" is inf") != std::string::npos) << reason;
  EXPECT_NE(reason.find("on_nonfinite"), std::string::npos) << reason;
  EXPECT_EQ(Field(job, "generation"), 1) << "divergence is the job's, not a failure to retry";
}

TEST(NonFinite, BadBatchFailsTheJobByDefaultNamingItsStep) {
  LocalCluster cluster;
  const std::string model = WriteBadThirdBatchModel(cluster.root());
  const std::string id = cluster.Submit(Job("{name: torchscript, path: " + model + "}", ""));
  auto job = cluster.WaitForState(id, {"FAILED", "SUCCEEDED"}, seconds(180));
  ASSERT_EQ(job.value("state", ""), "FAILED") << job.dump(2) << cluster.Logs();
  EXPECT_NE(job.value("reason", "").find("the loss of step 3 is inf"), std::string::npos) << job.dump(2);
}

TEST(NonFinite, SkipStepDropsTheBadStepOnEveryRankAndTrainsOn) {
  LocalCluster cluster;
  const std::string model = WriteBadThirdBatchModel(cluster.root());
  const std::string id = cluster.Submit(Job("{name: torchscript, path: " + model + "}", "skip_step"));
  auto job = cluster.WaitForState(id, {"FAILED", "SUCCEEDED"}, seconds(180));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "step"), 12);
  EXPECT_EQ(Field(job, "generation"), 1);
  const std::string warning = job.value("warning", "");
  EXPECT_NE(warning.find("1 step skipped"), std::string::npos) << job.dump(2);
  EXPECT_NE(warning.find("step 3"), std::string::npos) << job.dump(2);
  EXPECT_NE(cluster.Herd({"status", id}).out.find("Warning:"), std::string::npos);
  for (int worker = 0; worker < 2; ++worker) {
    const std::string log = ReadFile(cluster.job_dir(worker, id) + "/trainer.log");
    EXPECT_NE(log.find("step 3 skipped"), std::string::npos) << log;
  }
}

// A model with nothing to train (its one parameter is frozen, so its loss
// needs no grad) fails at once with a reason saying so, without spending
// the restart budget on retries that would fail alike.
TEST(BadModel, LossThatNeedsNoGradFailsTheJobAtOnceNamingWhy) {
  LocalCluster cluster;
  const std::string model = WriteBadThirdBatchModel(cluster.root(), /*trainable=*/false);
  const std::string id = cluster.Submit(Job("{name: torchscript, path: " + model + "}", ""));
  auto job = cluster.WaitForState(id, {"FAILED", "SUCCEEDED"}, seconds(180));
  ASSERT_EQ(job.value("state", ""), "FAILED") << job.dump(2) << cluster.Logs();
  const std::string reason = job.value("reason", "");
  EXPECT_NE(reason.find("its loss does not require grad"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("frame #"), std::string::npos) << reason;
  EXPECT_EQ(Field(job, "generation"), 1) << "a model error is the job's, not a failure to retry";
}

}  // namespace
}  // namespace herd::testing
