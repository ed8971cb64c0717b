// Checkpoint storage that fails under a running job, with real processes and
// a real filesystem: a tmpfs too small for one checkpoint (every write fails
// with ENOSPC part-way) and one remounted read-only. By default
// (checkpoint.on_failure: continue) the job trains on, shows the failure as
// its warning and leaves no temporary folder; with on_failure: fail it fails
// at once with a reason naming the storage error.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/small_disk.h"

namespace herd::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

std::string Spec(const std::string& on_failure) {
  return "model: mlp\n"
         "dataset: {kind: synthetic, synthetic_samples: 4000, synthetic_features: 64}\n"
         "batch_size: 16\n"
         "max_steps: 120\n"
         "log_interval_steps: 10\n"
         "checkpoint: {interval_steps: 20, on_failure: " + on_failure + "}\n"
         "min_workers: 2\n";
}

std::vector<std::string> Leftovers(const std::string& root) {
  std::vector<std::string> found;
  std::error_code error;
  for (fs::recursive_directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    if (it->path().filename().string().rfind(".tmp-", 0) == 0) found.push_back(it->path().string());
  }
  return found;
}

TEST(CheckpointStorage, FullDiskCostsCheckpointsNotTheJob) {
  SmallDisk disk("48k");  // smaller than one mlp checkpoint
  ASSERT_TRUE(disk.mounted());
  ClusterOptions options;
  options.checkpoint_root = disk.dir();
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(Spec("continue"));
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "step"), 120);
  EXPECT_EQ(Field(job, "generation"), 1) << "a storage failure must not re-form the job";
  EXPECT_NE(job.value("warning", "").find("No space left on device"), std::string::npos) << job.dump(2);
  EXPECT_NE(cluster.Herd({"status", id}).out.find("Warning:"), std::string::npos);
  EXPECT_TRUE(cluster.HerdJson({"checkpoints", id})["checkpoints"].empty());
  EXPECT_EQ(Leftovers(disk.dir()), std::vector<std::string>{});
  const std::string log = ReadFile(cluster.job_dir(0, id) + "/trainer.log");
  EXPECT_GE(Count(log, "training goes on (checkpoint.on_failure: continue)"), 5) << log;
}

TEST(CheckpointStorage, ReadOnlyStorageCostsCheckpointsNotTheJob) {
  SmallDisk disk("8m");
  ASSERT_TRUE(disk.mounted());
  disk.MakeReadOnly();
  ClusterOptions options;
  options.checkpoint_root = disk.dir();
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(Spec("continue"));
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_NE(job.value("warning", "").find("Read-only file system"), std::string::npos) << job.dump(2);
}

TEST(CheckpointStorage, OnFailureFailEndsTheJobNamingTheStorageError) {
  SmallDisk disk("48k");
  ASSERT_TRUE(disk.mounted());
  ClusterOptions options;
  options.checkpoint_root = disk.dir();
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(Spec("fail"));
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "FAILED") << job.dump(2) << cluster.Logs();
  const std::string reason = job.value("reason", "");
  EXPECT_NE(reason.find("checkpoint at step 20 failed"), std::string::npos) << reason;
  EXPECT_NE(reason.find("No space left on device"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("restart budget"), std::string::npos) << "no restart was spent on it: " << reason;
  EXPECT_EQ(Leftovers(disk.dir()), std::vector<std::string>{});
}

}  // namespace
}  // namespace herd::testing
