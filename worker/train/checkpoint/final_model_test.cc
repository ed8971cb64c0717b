#include "worker/train/checkpoint/final_model.h"

#include <gtest/gtest.h>
#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/sha256.h"
#include "worker/train/checkpoint/safetensors.h"

namespace herd {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

TEST(FinalModel, WritesBothFilesWithTheirDigests) {
  const std::string dir = ::testing::TempDir() + "/final_model_test";
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"fc.weight", torch::arange(6, torch::kFloat).reshape({2, 3}).t()},  // not contiguous
      {"fc.bias", torch::tensor({0.5f, -1.5f})},
      {"bn.num_batches_tracked", torch::tensor(7, torch::kLong)},
  };
  auto files = WriteFinalModel(dir, tensors, {{"format", "pt"}});
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 2u);
  for (const v1::ModelFile& file : *files) {
    const std::string bytes = ReadAll(dir + "/" + file.name());
    EXPECT_EQ(file.size_bytes(), static_cast<int64_t>(bytes.size())) << file.name();
    EXPECT_EQ(file.sha256(), Sha256Hex(bytes)) << file.name();
  }
  auto decoded = DecodeSafetensors(ReadAll(dir + "/" + kFinalSafetensorsFile));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->tensors.size(), 3u);
  for (const SafetensorsTensor& t : decoded->tensors) {
    auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& named) { return named.first == t.name; });
    ASSERT_NE(it, tensors.end()) << t.name;
    const torch::Tensor expected = it->second.contiguous();
    EXPECT_EQ(t.shape, expected.sizes().vec()) << t.name;
    EXPECT_EQ(t.data, std::string(static_cast<const char*>(expected.data_ptr()), expected.nbytes())) << t.name;
  }
  EXPECT_EQ(decoded->tensors[2].dtype, "F32");  // fc.weight, by name order
  EXPECT_EQ(decoded->tensors[0].dtype, "I64");  // bn.num_batches_tracked

  // The archive holds the same tensors.
  torch::serialize::InputArchive archive;
  archive.load_from(dir + "/" + kFinalModelFile);
  torch::Tensor weight;
  archive.read("fc.weight", weight);
  EXPECT_TRUE(torch::equal(weight, tensors[0].second));
}

TEST(FinalModel, RefusesADtypeSafetensorsLacks) {
  auto bytes = SafetensorsOf({{"z", torch::zeros({2}, torch::kComplexFloat)}}, {});
  EXPECT_TRUE(absl::IsInvalidArgument(bytes.status()));
  EXPECT_NE(bytes.status().message().find("'z'"), std::string::npos) << bytes.status();
}

}  // namespace
}  // namespace herd
