// The demo path end to end: the README's job file, 2 workers, mnist_cnn on
// Fashion-MNIST for one epoch, must reach at least 85% test accuracy.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/harness/local_cluster.h"

namespace herd::testing {
namespace {

TEST(Convergence, DemoJobReachesEightyFivePercent) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  LocalCluster cluster;
  const std::string job_file = LocalCluster::Binary("examples/fashion-mnist-cnn.yaml");
  nlohmann::json submitted = cluster.HerdJson({"submit", job_file});
  const std::string id = submitted.value("id", "");
  ASSERT_FALSE(id.empty());
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED", "CANCELLED"}, std::chrono::minutes(20));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(job.value("epoch", 0), 1);
  EXPECT_EQ(job.value("world_size", 0), 2);
  ASSERT_TRUE(job["eval"].contains("accuracy")) << job.dump(2);
  const double accuracy = job["eval"]["accuracy"].get<double>();
  std::cout << "test accuracy after 1 epoch: " << accuracy << "\n";
  EXPECT_GE(accuracy, 0.85);
}

}  // namespace
}  // namespace herd::testing
