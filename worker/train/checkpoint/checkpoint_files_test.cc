#include "worker/train/checkpoint/checkpoint_files.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

namespace herd {
namespace {

namespace fs = std::filesystem;

std::string FreshRoot(const std::string& name) {
  fs::path root = fs::path(testing::TempDir()) / name;
  fs::remove_all(root);
  fs::create_directories(root);
  return root.string();
}

std::map<std::string, std::string> Payload(int64_t step, size_t bytes) {
  std::string model(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) model[i] = static_cast<char>((i * 31 + step) & 0xff);
  return {{"model.pt", model}, {"state.json", "{\"step\": " + std::to_string(step) + "}"}};
}

TEST(CheckpointFiles, RoundTripAndListing) {
  const std::string root = FreshRoot("roundtrip");
  for (int64_t step : {10, 30, 20}) {
    auto folder = WriteCheckpointFolder(root, "job-1", step, Payload(step, 4096));
    ASSERT_TRUE(folder.ok()) << folder.status();
    EXPECT_EQ(folder->step, step);
    EXPECT_EQ(folder->size_bytes, 4096 + static_cast<int64_t>(Payload(step, 0)["state.json"].size()));
    EXPECT_EQ(folder->manifest_sha256.size(), 64u);
  }
  auto listed = ListCheckpointFolders(root, "job-1");
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].step, 30);  // newest first
  EXPECT_EQ(listed[2].step, 10);
  auto files = ReadCheckpointFolder(root, listed[0].relative_path);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, Payload(30, 4096));
  ASSERT_TRUE(DeleteCheckpointFolder(root, listed[2].relative_path).ok());
  EXPECT_EQ(ListCheckpointFolders(root, "job-1").size(), 2u);
}

int Leftovers(const std::string& job_dir) {
  int found = 0;
  for (const auto& entry : fs::directory_iterator(job_dir)) found += entry.path().filename().string().rfind(".tmp-", 0) == 0;
  return found;
}

// A write that fails after its temporary folder exists (here a bad file name
// after a good one; a full disk fails the same way) leaves nothing behind.
TEST(CheckpointFiles, AFailedWriteLeavesNoTemporaryFolder) {
  const std::string root = FreshRoot("failed");
  auto files = Payload(10, 1024);
  files["zz/escapes"] = "x";
  auto folder = WriteCheckpointFolder(root, "job-1", 10, files);
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(Leftovers(root + "/job-1"), 0);
  EXPECT_TRUE(ListCheckpointFolders(root, "job-1").empty());
}

// Leftovers of a crashed writer are swept at the next start, complete
// checkpoints stay.
TEST(CheckpointFiles, SweepRemovesCrashLeftoversOnly) {
  const std::string root = FreshRoot("sweep");
  ASSERT_TRUE(WriteCheckpointFolder(root, "job-1", 10, Payload(10, 64)).ok());
  fs::create_directories(root + "/job-1/.tmp-step-0000000020-4242");
  std::ofstream(root + "/job-1/.tmp-step-0000000020-4242/model.pt") << "half";
  fs::create_directories(root + "/job-1/.tmp-step-0000000030-4343");
  EXPECT_EQ(SweepCheckpointLeftovers(root, "job-1"), 2);
  EXPECT_EQ(Leftovers(root + "/job-1"), 0);
  EXPECT_EQ(ListCheckpointFolders(root, "job-1").size(), 1u);
  EXPECT_EQ(SweepCheckpointLeftovers(root, "job-1"), 0);
  EXPECT_EQ(SweepCheckpointLeftovers(root, "no-such-job"), 0);
}

TEST(CheckpointFiles, CorruptionIsDetected) {
  const std::string root = FreshRoot("corrupt");
  auto folder = WriteCheckpointFolder(root, "job-1", 5, Payload(5, 1000));
  ASSERT_TRUE(folder.ok());
  const fs::path model = fs::path(root) / folder->relative_path / "model.pt";
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    char c = 0;
    f.read(&c, 1);
    f.seekp(500);
    c ^= 0x01;  // one flipped bit
    f.write(&c, 1);
  }
  auto flipped = ReadCheckpointFolder(root, folder->relative_path);
  ASSERT_FALSE(flipped.ok());
  EXPECT_EQ(flipped.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(flipped.status().message().find("model.pt: SHA-256 mismatch"), std::string::npos) << flipped.status();

  fs::resize_file(model, 10);
  auto truncated = ReadCheckpointFolder(root, folder->relative_path);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("size 10 differs"), std::string::npos) << truncated.status();
}

TEST(CheckpointFiles, PathsCannotEscapeTheRoot) {
  const std::string root = FreshRoot("escape");
  EXPECT_FALSE(WriteCheckpointFolder(root, "../outside", 1, Payload(1, 10)).ok());
  EXPECT_FALSE(ReadCheckpointFolder(root, "../../etc").ok());
  EXPECT_FALSE(DeleteCheckpointFolder(root, "..").ok());
  EXPECT_FALSE(WriteCheckpointFolder(root, "job", 1, {{"../evil", "x"}}).ok());
}

// SIGKILL a writer at random moments, many times: whatever is listed as a
// checkpoint must always verify, and the newest listed one is the newest that
// finished writing.
TEST(CheckpointFiles, KilledWritersNeverLeaveAnIncompleteCheckpoint) {
  const std::string root = FreshRoot("killed");
  std::mt19937 rng(1234);
  int64_t next_step = 1;
  int kills_mid_write = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t first = next_step;
    pid_t child = fork();
    if (child == 0) {
      for (int64_t step = first;; ++step) {
        if (!WriteCheckpointFolder(root, "job-k", step, Payload(step, 256 << 10)).ok()) _exit(3);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 20000)(rng)));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer failed on its own";

    auto listed = ListCheckpointFolders(root, "job-k");
    for (const auto& folder : listed) {
      auto files = ReadCheckpointFolder(root, folder.relative_path);
      ASSERT_TRUE(files.ok()) << "trial " << trial << ": " << files.status();
      EXPECT_EQ(*files, Payload(folder.step, 256 << 10));
    }
    // A writer killed before its first mkdir (a loaded machine may not
    // have run it at all yet) left nothing to look at.
    if (!fs::exists(fs::path(root) / "job-k")) continue;
    for (const auto& entry : fs::directory_iterator(fs::path(root) / "job-k")) {
      if (entry.path().filename().string().rfind(".tmp-", 0) == 0) {
        ++kills_mid_write;
        fs::remove_all(entry.path());  // what a restarted writer would do
      }
    }
    next_step = listed.empty() ? first : listed[0].step + 1;
  }
  // The kills really did land in the middle of writes.
  EXPECT_GT(kills_mid_write, 0);
}

}  // namespace
}  // namespace herd
