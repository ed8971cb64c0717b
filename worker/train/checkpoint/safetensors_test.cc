#include "worker/train/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

namespace herd {
namespace {

std::string FloatBytes(std::vector<float> values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TEST(Safetensors, ATinyFileHasTheSpecifiedByteLayout) {
  auto bytes =
      EncodeSafetensors({{"w", "F32", {2}, FloatBytes({1.0f, -2.0f})}, {"b", "U8", {1}, std::string("\x07", 1)}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // Names sorted, b's data first; 106 bytes of JSON padded with 6 spaces to 112.
  const std::string json =
      R"({"b":{"data_offsets":[0,1],"dtype":"U8","shape":[1]},"w":{"data_offsets":[1,9],"dtype":"F32","shape":[2]}})";
  ASSERT_EQ(json.size(), 106u);
  std::string expected(8, '\0');
  expected[0] = 112;
  expected += json + "      ";
  expected += '\x07';
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);  // 1.0f, -2.0f little-endian
  EXPECT_EQ(*bytes, expected);
}

TEST(Safetensors, TheHeaderIsPaddedWithSpacesToEightBytes) {
  auto bytes = EncodeSafetensors({{"x", "F32", {}, FloatBytes({3.0f})}}, {{"format", "pt"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= static_cast<uint64_t>(static_cast<unsigned char>((*bytes)[i])) << (8 * i);
  EXPECT_EQ(header % 8, 0u);
  ASSERT_EQ(bytes->size(), 8 + header + 4);
  const std::string json = bytes->substr(8, header);
  const size_t closing = json.rfind('}');
  EXPECT_EQ(json.substr(closing + 1), std::string(json.size() - closing - 1, ' '));
  EXPECT_NE(json.find(R"("__metadata__":{"format":"pt"})"), std::string::npos) << json;
}

TEST(Safetensors, RoundTripsTensorsAndMetadata) {
  std::vector<SafetensorsTensor> tensors = {
      {"conv1.weight", "F32", {2, 1, 3, 3}, FloatBytes(std::vector<float>(18, 0.25f))},
      {"bn.num_batches_tracked", "I64", {}, std::string(8, '\x05')},
      {"empty", "F16", {0, 4}, ""},
      {"half", "BF16", {3}, std::string("\x01\x02\x03\x04\x05\x06", 6)},
  };
  auto bytes = EncodeSafetensors(tensors, {{"model", "mnist_cnn"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto decoded = DecodeSafetensors(*bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->metadata, (std::map<std::string, std::string>{{"model", "mnist_cnn"}}));
  ASSERT_EQ(decoded->tensors.size(), tensors.size());
  for (const SafetensorsTensor& original : tensors) {
    auto it = std::find_if(decoded->tensors.begin(), decoded->tensors.end(),
                           [&](const auto& t) { return t.name == original.name; });
    ASSERT_NE(it, decoded->tensors.end()) << original.name;
    EXPECT_EQ(it->dtype, original.dtype);
    EXPECT_EQ(it->shape, original.shape);
    EXPECT_EQ(it->data, original.data) << original.name;
  }
  // Equal contents, equal bytes, whatever the order given.
  std::reverse(tensors.begin(), tensors.end());
  EXPECT_EQ(*EncodeSafetensors(tensors, {{"model", "mnist_cnn"}}), *bytes);
}

TEST(Safetensors, RefusesTensorsThatDoNotMatchTheirShape) {
  auto wrong_size = EncodeSafetensors({{"w", "F32", {3}, FloatBytes({1.0f, 2.0f})}});
  EXPECT_TRUE(absl::IsInvalidArgument(wrong_size.status()));
  EXPECT_NE(wrong_size.status().message().find("'w'"), std::string::npos) << wrong_size.status();
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeSafetensors({{"w", "F8", {1}, "x"}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeSafetensors({{"w", "U8", {1}, "x"}, {"w", "U8", {1}, "y"}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeSafetensors({{"__metadata__", "U8", {1}, "x"}}).status()));
}

TEST(Safetensors, DecodingNamesWhatIsWrong) {
  std::string good = *EncodeSafetensors({{"w", "F32", {2}, FloatBytes({1.0f, 2.0f})}});
  EXPECT_TRUE(absl::IsDataLoss(DecodeSafetensors(good.substr(0, 5)).status()));
  auto truncated = DecodeSafetensors(good.substr(0, good.size() - 1));
  EXPECT_TRUE(absl::IsDataLoss(truncated.status()));
  EXPECT_NE(truncated.status().message().find("'w'"), std::string::npos) << truncated.status();
  auto extra = DecodeSafetensors(good + "zz");
  EXPECT_TRUE(absl::IsDataLoss(extra.status()));
  std::string long_header = good;
  long_header[0] = '\x7f';
  long_header[1] = '\x7f';
  EXPECT_TRUE(absl::IsDataLoss(DecodeSafetensors(long_header).status()));
}

}  // namespace
}  // namespace herd
