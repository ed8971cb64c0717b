#include "coordinator/ready_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace herd::coordinator {
namespace {

TEST(ReadyFile, WritesBothAddressesAndLeavesNoTemporary) {
  const std::string dir = ::testing::TempDir() + "/ready";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/ready.json";
  ASSERT_TRUE(WriteReadyFile(path, "127.0.0.1:4242", "127.0.0.1:4343").ok());
  ASSERT_TRUE(WriteReadyFile(path, "127.0.0.1:5000", "").ok());  // replaces, never appends

  nlohmann::json ready = nlohmann::json::parse(std::ifstream(path));
  EXPECT_EQ(ready["listen"], "127.0.0.1:5000");
  EXPECT_EQ(ready["metrics"], "");
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);
}

TEST(ReadyFile, UnwritableFolderIsAnError) {
  EXPECT_FALSE(WriteReadyFile("/nonexistent-folder/ready.json", "a:1", "b:2").ok());
}

}  // namespace
}  // namespace herd::coordinator
