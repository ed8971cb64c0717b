// Durable checkpoints end to end: rank 0 writes them every N steps, the
// coordinator records each only once complete, retention keeps the newest
// N, and what the catalog lists verifies on disk.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/harness/local_cluster.h"
#include "worker/train/checkpoint_files.h"

namespace herd::testing {
namespace {

namespace fs = std::filesystem;

TEST(Checkpoints, WrittenRecordedAndRetained) {
  LocalCluster cluster;
  const std::string id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 2048, synthetic_features: 64}
batch_size: 16
max_steps: 20
log_interval_steps: 5
checkpoint: {interval_steps: 5, keep: 2}
min_workers: 2
)");
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, std::chrono::seconds(180));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << cluster.Logs();

  auto catalog = cluster.HerdJson({"checkpoints", id});
  ASSERT_EQ(catalog["checkpoints"].size(), 2u) << catalog.dump(2);
  std::set<int64_t> steps;
  // The default root is beside the daemons' jobs folders; rank 0 is worker-0.
  const std::string root = cluster.worker_dir(0) + "/checkpoints";
  for (const auto& c : catalog["checkpoints"]) {
    steps.insert(c["step"].get<int64_t>());
    EXPECT_EQ(c["id"].get<std::string>().rfind("ckpt-", 0), 0u);  // made by the server
    const std::string path = c["path"];
    auto files = ReadCheckpointFolder(root, path);
    ASSERT_TRUE(files.ok()) << files.status();
    EXPECT_EQ(Sha256Hex(ReadFile(root + "/" + path + "/MANIFEST")), c["sha256"].get<std::string>());
  }
  EXPECT_EQ(steps, (std::set<int64_t>{15, 20}));
  // Retention removed the older ones from disk too.
  auto on_disk = ListCheckpointFolders(root, id);
  ASSERT_EQ(on_disk.size(), 2u);
  EXPECT_EQ(on_disk[0].step, 20);
  EXPECT_EQ(on_disk[1].step, 15);
}

}  // namespace
}  // namespace herd::testing
