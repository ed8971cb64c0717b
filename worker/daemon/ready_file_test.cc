#include "worker/daemon/ready_file.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace herd::worker {
namespace {

TEST(ReadyFileTest, WritesWorkerIdAndMetricsAddress) {
  std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / "ready.json";
  std::filesystem::remove(path);
  ASSERT_TRUE(WriteReadyFile(path.string(), "w1", "127.0.0.1:9100").ok());
  nlohmann::json document = nlohmann::json::parse(std::ifstream(path));
  EXPECT_EQ(document["worker_id"], "w1");
  EXPECT_EQ(document["metrics"], "127.0.0.1:9100");
  // Only the final file is left behind.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(path.parent_path())) {
    if (entry.path().filename().string().rfind("ready.json", 0) == 0) ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(ReadyFileTest, UnwritablePathIsAnError) {
  EXPECT_FALSE(WriteReadyFile("/nonexistent-dir/ready.json", "w", "").ok());
}

TEST(ReadyFileTest, AdvertisedMetricsAddress) {
  EXPECT_EQ(AdvertisedMetricsAddress("127.0.0.1:0", 41234), "127.0.0.1:41234");
  EXPECT_EQ(AdvertisedMetricsAddress("0.0.0.0:9100", 9100), "127.0.0.1:9100");
  EXPECT_EQ(AdvertisedMetricsAddress("node7:9100", 9100), "node7:9100");
}

}  // namespace
}  // namespace herd::worker
