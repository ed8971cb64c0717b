// Durable checkpoints end to end: rank 0 writes them every N steps, the
// coordinator records each only once complete, retention keeps the newest
// N, and what the catalog lists verifies on disk.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

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
  const std::string root = cluster.checkpoint_root();
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

// Every trainer dies (SIGKILL) and the newest recorded checkpoint is
// corrupt: the job restarts in a new generation from the previous checkpoint,
// which is verified by its manifest, and still finishes.
TEST(Checkpoints, AllTrainersLostResumesFromNewestValidCheckpoint) {
  LocalCluster cluster;
  const std::string id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 100000}
batch_size: 16
max_steps: 300
log_interval_steps: 10
checkpoint: {interval_steps: 10, keep: 5}
min_workers: 2
)");
  // Wait for a few checkpoints.
  nlohmann::json catalog;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    catalog = cluster.HerdJson({"checkpoints", id});
    if (catalog["checkpoints"].size() >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(catalog["checkpoints"].size(), 3u) << cluster.Logs();

  // Kill every trainer of the job, then flip a byte in the newest recorded
  // checkpoint before a new generation can start.
  CommandResult killed = RunCommand({"/usr/bin/pkill", "-KILL", "-f", "herd-trainer .*--job=" + id},
                                    std::chrono::seconds(10));
  ASSERT_EQ(killed.exit_code, 0) << killed.err;
  catalog = cluster.HerdJson({"checkpoints", id});
  int64_t newest_step = -1;
  std::string newest_path;
  for (const auto& c : catalog["checkpoints"]) {
    if (c["step"].get<int64_t>() > newest_step) {
      newest_step = c["step"].get<int64_t>();
      newest_path = c["path"];
    }
  }
  const std::string model = cluster.checkpoint_root() + "/" + newest_path + "/model.pt";
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << model;
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  }

  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, std::chrono::seconds(240));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_GE(job.value("generation", 0), 2);
  EXPECT_EQ(job.value("step", 0), 300);
  // Rank 0's new trainer skipped the corrupt checkpoint and resumed from the
  // one before it.
  const std::string log = ReadFile(cluster.job_dir(0, id) + "/trainer.log");
  EXPECT_NE(log.find("skipping checkpoint " + newest_path), std::string::npos) << log;
  EXPECT_NE(log.find("SHA-256 mismatch"), std::string::npos) << log;
  EXPECT_NE(log.find("resumed from checkpoint"), std::string::npos) << log;
  EXPECT_EQ(log.find("resumed from checkpoint " + newest_path), std::string::npos) << log;
}

}  // namespace
}  // namespace herd::testing
