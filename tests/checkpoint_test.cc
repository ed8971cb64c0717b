// Durable checkpoints end to end: rank 0 writes them every N steps, the
// coordinator records each only once complete, retention keeps the newest
// N, and what the catalog lists verifies on disk.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "worker/train/checkpoint/checkpoint_files.h"

namespace herd::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

// The catalog's checkpoints of a job: step -> path.
std::map<int64_t, std::string> Catalog(LocalCluster& cluster, const std::string& id) {
  std::map<int64_t, std::string> steps;
  const nlohmann::json listed = cluster.HerdJson({"checkpoints", id});  // outlives the loop
  for (const auto& c : listed["checkpoints"]) {
    steps[c["step"].get<int64_t>()] = c["path"].get<std::string>();
  }
  return steps;
}

// Flips a byte of `path` (a corrupt checkpoint file).
void FlipAByte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(100);
  char c = 0;
  f.read(&c, 1);
  f.seekp(100);
  c = static_cast<char>(c ^ 0x40);
  f.write(&c, 1);
}

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

// The coordinator goes down as the job ends: frozen (SIGSTOP) once the job
// trains, so the checkpoints after that, the final one included, are written
// while nobody can record them; killed once the trainers have exited, then
// restarted. The trainers hand their unacknowledged records to their daemons,
// which deliver them to the new coordinator: the final checkpoint is in the
// catalog, retention (keep) applies to all of them, and nothing is left on
// disk outside the catalog.
TEST(Checkpoints, FinalCheckpointIsRecordedWhenTheCoordinatorDiesAsTheJobEnds) {
  LocalCluster cluster;
  const std::string id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 40000, synthetic_features: 64}
batch_size: 16
max_steps: 600
log_interval_steps: 10
checkpoint: {interval_steps: 100, keep: 2}
min_workers: 2
)");
  auto running = WaitForJob(cluster, id, [](const nlohmann::json& status) { return Field(status, "step") >= 10; },
                            seconds(120));
  ASSERT_GE(Field(running, "step"), 10) << running.dump(2) << cluster.Logs();
  std::map<int64_t, std::string> catalog = Catalog(cluster, id);
  const int64_t step_before = Field(cluster.HerdJson({"status", id}), "step");
  cluster.coordinator().Signal(SIGSTOP);
  const auto trainers_deadline = Clock::now() + seconds(300);
  while ((!TrainerPids(cluster, 0).empty() || !TrainerPids(cluster, 1).empty()) && Clock::now() < trainers_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const bool trainers_gone = TrainerPids(cluster, 0).empty() && TrainerPids(cluster, 1).empty();
  cluster.StopCoordinator(SIGKILL);
  ASSERT_TRUE(trainers_gone) << cluster.Logs();
  // Written while the coordinator was frozen, so not recorded yet.
  ASSERT_EQ(ListCheckpointFolders(cluster.checkpoint_root(), id).front().step, 600);
  ASSERT_EQ(catalog.count(600), 0u) << "the final checkpoint was recorded before the freeze: nothing tested";
  cluster.StartCoordinator();

  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(120));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(job, "step"), 600) << job.dump(2);
  EXPECT_GE(Field(job, "step"), step_before);
  // The daemon delivers the records before the exit: listed once the job ended.
  catalog = Catalog(cluster, id);
  EXPECT_EQ(catalog, (std::map<int64_t, std::string>{{500, id + "/step-0000000500"}, {600, id + "/step-0000000600"}}));
  std::map<int64_t, std::string> on_disk;
  for (const auto& folder : ListCheckpointFolders(cluster.checkpoint_root(), id)) {
    on_disk[folder.step] = folder.relative_path;
  }
  const auto disk_deadline = Clock::now() + seconds(30);  // retention's deletes follow the answers
  while (on_disk != catalog && Clock::now() < disk_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    on_disk.clear();
    for (const auto& folder : ListCheckpointFolders(cluster.checkpoint_root(), id)) {
      on_disk[folder.step] = folder.relative_path;
    }
  }
  EXPECT_EQ(on_disk, catalog) << "nothing on disk outside the catalog and keep";
  for (const auto& [step, path] : catalog) {
    EXPECT_TRUE(ReadCheckpointFolder(cluster.checkpoint_root(), path).ok()) << path;
  }
}

// The newest checkpoint is corrupt when every trainer is lost: the job
// resumes from an older one, and users see which file was skipped and why
// in `herd status` and `herd watch`, not only in the trainer's log.
TEST(Checkpoints, FallbackToAnOlderCheckpointIsShownInStatusAndWatch) {
  LocalCluster cluster;
  const std::string id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 100000}
batch_size: 16
max_steps: 150
log_interval_steps: 10
checkpoint: {interval_steps: 10, keep: 5}
min_workers: 2
)");
  std::map<int64_t, std::string> catalog;
  const auto deadline = Clock::now() + seconds(120);
  while (catalog.size() < 3 && Clock::now() < deadline) {
    catalog = Catalog(cluster, id);
    if (catalog.size() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(catalog.size(), 3u) << cluster.Logs();
  CommandResult killed = RunCommand({"/usr/bin/pkill", "-KILL", "-f", "herd-trainer .*--job=" + id}, seconds(10));
  ASSERT_EQ(killed.exit_code, 0) << killed.err;
  catalog = Catalog(cluster, id);
  const std::string newest = catalog.rbegin()->second;
  // Any complete folder newer than the catalog's (its record was in flight)
  // would be tried after it: corrupt those too, so the fallback is older.
  for (const auto& folder : ListCheckpointFolders(cluster.checkpoint_root(), id)) {
    if (folder.step >= catalog.rbegin()->first) FlipAByte(cluster.checkpoint_root() + "/" + folder.relative_path + "/model.pt");
  }

  auto job = WaitForJob(cluster, id, [&](const nlohmann::json& status) {
    return status.value("warning", "").find(newest) != std::string::npos ||
           status.value("state", "") == "SUCCEEDED" || status.value("state", "") == "FAILED";
  }, seconds(240));
  const std::string warning = job.value("warning", "");
  EXPECT_NE(warning.find(newest), std::string::npos) << job.dump(2) << cluster.Logs();
  EXPECT_NE(warning.find("SHA-256 mismatch"), std::string::npos) << warning;
  EXPECT_NE(warning.find("resumed from " + id + "/step-"), std::string::npos) << warning;
  const std::string status_text = cluster.Herd({"status", id}).out;
  EXPECT_NE(status_text.find("Warning:"), std::string::npos) << status_text;
  EXPECT_NE(status_text.find(newest), std::string::npos) << status_text;

  job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED"}, seconds(240));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  // herd watch of the ended job prints its summary, the warning with it.
  CommandResult watched = cluster.Herd({"watch", id});
  EXPECT_EQ(watched.exit_code, 0) << watched.err;
  EXPECT_NE(watched.out.find("warning: unusable checkpoint skipped (" + newest), std::string::npos) << watched.out;
}

}  // namespace
}  // namespace herd::testing
