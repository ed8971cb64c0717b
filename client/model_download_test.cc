#include "client/model_download.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/sha256.h"

namespace herd::client {
namespace {

namespace fs = std::filesystem;

class ModelDownloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / "model_download_test";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    return names;
  }
  static std::string Read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
  }
  fs::path dir_;
};

TEST_F(ModelDownloadTest, AMatchingFileLandsUnderItsNameAndNothingElse) {
  const std::string data = "0123456789abcdef";
  auto download = ModelDownload::Start((dir_ / "job.safetensors").string());
  ASSERT_TRUE(download.ok()) << download.status();
  ASSERT_TRUE((*download)->Append(data.substr(0, 5)).ok());
  // Until it is checked, the model's name does not exist.
  EXPECT_FALSE(fs::exists(dir_ / "job.safetensors"));
  ASSERT_TRUE((*download)->Append(data.substr(5)).ok());
  ASSERT_TRUE((*download)->Finish(16, Sha256Hex(data)).ok());
  download->reset();
  EXPECT_EQ(Read(dir_ / "job.safetensors"), data);
  EXPECT_EQ(Names(), std::vector<std::string>{"job.safetensors"});
}

TEST_F(ModelDownloadTest, AWrongDigestOrSizeLeavesNoFileAndSaysWhy) {
  auto download = ModelDownload::Start((dir_ / "job.safetensors").string());
  ASSERT_TRUE(download.ok());
  ASSERT_TRUE((*download)->Append("corrupted").ok());
  absl::Status status = (*download)->Finish(9, Sha256Hex("original!"));
  EXPECT_TRUE(absl::IsDataLoss(status));
  EXPECT_NE(status.message().find("job.safetensors: SHA-256 " + Sha256Hex("corrupted") + " differs from the recorded " +
                                  Sha256Hex("original!")),
            std::string::npos)
      << status;
  download->reset();
  EXPECT_TRUE(Names().empty());

  auto short_one = ModelDownload::Start((dir_ / "job.pt").string());
  ASSERT_TRUE((*short_one)->Append("abc").ok());
  status = (*short_one)->Finish(4, Sha256Hex("abc"));
  EXPECT_TRUE(absl::IsDataLoss(status));
  EXPECT_NE(status.message().find("received 3 bytes, the job recorded 4"), std::string::npos) << status;
  short_one->reset();
  EXPECT_TRUE(Names().empty());
}

TEST_F(ModelDownloadTest, AnAbandonedDownloadLeavesNothingAndKeepsAnOlderFile) {
  { std::ofstream(dir_ / "job.safetensors") << "older"; }
  {
    auto download = ModelDownload::Start((dir_ / "job.safetensors").string());
    ASSERT_TRUE((*download)->Append("half of a new one").ok());
  }
  EXPECT_EQ(Names(), std::vector<std::string>{"job.safetensors"});
  EXPECT_EQ(Read(dir_ / "job.safetensors"), "older");
}

TEST(Manifest, ParsesWhatCheckpointsWriteAndRefusesEscapes) {
  const std::string sha(64, 'a');
  auto entries = ParseManifest(sha + " 12 model.pt\n" + sha + " 3 state.bin\n");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_EQ(entries->size(), 2u);
  EXPECT_EQ(entries->at("model.pt").size_bytes, 12);
  EXPECT_EQ(entries->at("state.bin").sha256, sha);
  EXPECT_TRUE(absl::IsDataLoss(ParseManifest(sha + " 12 ../../x\n").status()));
  EXPECT_TRUE(absl::IsDataLoss(ParseManifest(sha + " 12 MANIFEST\n").status()));
  EXPECT_TRUE(absl::IsDataLoss(ParseManifest("abc 12 model.pt\n").status()));
  EXPECT_TRUE(absl::IsDataLoss(ParseManifest(sha + " -1 model.pt\n").status()));
}

}  // namespace
}  // namespace herd::client
