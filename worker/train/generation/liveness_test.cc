#include "worker/train/generation/liveness.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace herd {
namespace {

std::string Read(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// The daemon reads the last joined generation back from the alive file, so
// each join must replace the number, a shorter one too.
TEST(Liveness, MarkJoinedLeavesOnlyTheLatestGeneration) {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / "trainer.alive";
  std::filesystem::remove(path);
  ASSERT_TRUE(SetAliveFile(path.string()).ok());
  ASSERT_TRUE(MarkJoined(12).ok());
  EXPECT_EQ(Read(path), "12\n");
  ASSERT_TRUE(MarkJoined(3).ok());
  EXPECT_EQ(Read(path), "3\n");
}

TEST(Liveness, AnUnopenableAliveFileIsNamed) {
  absl::Status status = SetAliveFile("/nonexistent-dir/trainer.alive");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("/nonexistent-dir/trainer.alive"), std::string::npos) << status;
}

}  // namespace
}  // namespace herd
