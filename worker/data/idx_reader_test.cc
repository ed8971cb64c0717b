#include "worker/data/idx_reader.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "worker/data/testing/idx_test_files.h"

namespace herd {
namespace {

std::vector<uint8_t> Counting(size_t n) {
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 31 + 7);
  return data;
}

void ExpectContains(const absl::Status& status, const std::string& text) {
  EXPECT_NE(status.message().find(text), std::string::npos) << "'" << text << "' not in: " << status;
}

TEST(IdxReaderTest, ReadsRawAndGzipExactly) {
  const std::string folder = MakeTempFolder("idx_exact");
  const std::vector<uint8_t> data = Counting(4 * 3 * 5);
  const std::vector<uint8_t> bytes = IdxBytes({4, 3, 5}, data);
  WriteRawFile(folder + "/a", bytes);
  WriteGzipFile(folder + "/a.gz", bytes);
  for (const std::string& file : {folder + "/a", folder + "/a.gz"}) {
    absl::StatusOr<IdxArray> array = ReadIdxFile(file, 3);
    ASSERT_TRUE(array.ok()) << array.status();
    EXPECT_EQ(array->dims, (std::vector<int64_t>{4, 3, 5}));
    EXPECT_EQ(array->num_elements(), 60);
    EXPECT_EQ(std::vector<uint8_t>(array->data(), array->data() + 60), data);
  }
}

TEST(IdxReaderTest, LargeGzipFileSpanningManyReadChunks) {
  const std::string folder = MakeTempFolder("idx_large");
  const std::vector<uint8_t> data = Counting(3000 * 1000);
  WriteGzipFile(folder + "/big.gz", IdxBytes({3000, 1000}, data));
  absl::StatusOr<IdxArray> array = ReadIdxFile(folder + "/big.gz", 2);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(std::vector<uint8_t>(array->data(), array->data() + data.size()), data);
}

TEST(IdxReaderTest, GarbledMagic) {
  const std::string folder = MakeTempFolder("idx_magic");
  std::vector<uint8_t> bytes = IdxBytes({2}, {1, 2});
  bytes[2] = 0x0d;  // float data, not bytes
  WriteRawFile(folder + "/labels", bytes);
  absl::Status status = ReadIdxFile(folder + "/labels", 1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(status, "bad IDX magic 0x00000d01");
  ExpectContains(status, folder + "/labels");
}

TEST(IdxReaderTest, WrongNumberOfDimensionsIsABadMagic) {
  const std::string folder = MakeTempFolder("idx_dims");
  WriteRawFile(folder + "/labels", IdxBytes({2}, {1, 2}));
  absl::Status status = ReadIdxFile(folder + "/labels", 3).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(status, "bad IDX magic 0x00000801");
}

TEST(IdxReaderTest, TruncatedRawFile) {
  const std::string folder = MakeTempFolder("idx_truncated");
  std::vector<uint8_t> bytes = IdxBytes({10, 2, 2}, Counting(40));
  bytes.resize(bytes.size() - 3);
  WriteRawFile(folder + "/images", bytes);
  absl::Status status = ReadIdxFile(folder + "/images", 3).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  ExpectContains(status, "truncated: expected 56 bytes, got 53");
}

TEST(IdxReaderTest, TruncatedHeader) {
  const std::string folder = MakeTempFolder("idx_short_header");
  WriteRawFile(folder + "/images", {0, 0, 8, 3, 0, 0});
  ExpectContains(ReadIdxFile(folder + "/images", 3).status(), "truncated: expected 16 bytes of IDX header, got 6");
}

TEST(IdxReaderTest, TruncatedGzipStream) {
  const std::string folder = MakeTempFolder("idx_truncated_gz");
  WriteGzipFile(folder + "/full.gz", IdxBytes({1000, 100}, Counting(100000)));
  std::ifstream in(folder + "/full.gz", std::ios::binary);
  std::vector<uint8_t> compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  compressed.resize(compressed.size() / 2);
  WriteRawFile(folder + "/cut.gz", compressed);
  absl::Status status = ReadIdxFile(folder + "/cut.gz", 2).status();
  EXPECT_FALSE(status.ok());
  ExpectContains(status, "truncated");
}

TEST(IdxReaderTest, TrailingData) {
  const std::string folder = MakeTempFolder("idx_trailing");
  std::vector<uint8_t> bytes = IdxBytes({2}, {1, 2});
  bytes.push_back(9);
  WriteRawFile(folder + "/labels", bytes);
  ExpectContains(ReadIdxFile(folder + "/labels", 1).status(), "expected 10 bytes, got 11");
}

TEST(IdxReaderTest, MissingFile) {
  absl::Status status = ReadIdxFile("/nonexistent/idx", 1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  ExpectContains(status, "/nonexistent/idx");
}

}  // namespace
}  // namespace herd
