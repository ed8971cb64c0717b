#include "worker/data/npy_header.h"

#include "gtest/gtest.h"
#include "worker/data/testing/npy_test_files.h"

namespace herd {
namespace {

absl::StatusOr<NpyHeader> Parse(const std::string& bytes) {
  return ParseNpyHeader(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int64_t>(bytes.size()));
}

TEST(NpyHeader, ReadsDescrShapeAndDataOffsetForEveryVersion) {
  for (int version : {1, 2, 3}) {
    const std::string file = NpyBytes("<f4", {3, 4}, std::string(48, '\0'), version);
    auto header = Parse(file);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->descr, "<f4");
    EXPECT_EQ(header->shape, (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(header->item_bytes, 4);
    EXPECT_EQ(header->element_count(), 12);
    EXPECT_EQ(header->data_offset, static_cast<int64_t>(file.size()) - 48);
    EXPECT_EQ(header->data_offset % 64, 0);
  }
  auto vector = Parse(NpyBytes("<i8", {5}, ""));
  ASSERT_TRUE(vector.ok()) << vector.status();
  EXPECT_EQ(vector->shape, (std::vector<int64_t>{5}));
  auto bytes = Parse(NpyBytes("|u1", {2, 1, 28, 28}, ""));
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->item_bytes, 1);
  EXPECT_EQ(bytes->shape, (std::vector<int64_t>{2, 1, 28, 28}));
}

TEST(NpyHeader, NumPysOwnHeaderBytesParse) {
  // np.save(f, np.zeros((2, 3), np.float16)) with NumPy 1.24, verbatim.
  std::string header = "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }";
  header.resize(117, ' ');
  header += '\n';
  auto parsed = Parse(std::string("\x93NUMPY\x01\x00\x76\x00", 10) + header);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->descr, "<f2");
  EXPECT_EQ(parsed->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(parsed->data_offset, 128);
}

void ExpectRefused(const std::string& bytes, const std::string& text) {
  auto header = Parse(bytes);
  ASSERT_FALSE(header.ok()) << "accepted; wanted '" << text << "'";
  EXPECT_NE(header.status().message().find(text), std::string::npos) << header.status();
}

TEST(NpyHeader, RefusesWhatItCannotMapNamingWhy) {
  ExpectRefused("PK\x03\x04 a zip, say an .npz", "not a .npy file");
  ExpectRefused("", "not a .npy file");
  std::string v4 = NpyBytes("<f4", {2}, "");
  v4[6] = 4;
  ExpectRefused(v4, "version 4.0 is not supported");
  ExpectRefused(NpyBytes("<f4", {2, 2}, "", 1, /*fortran_order=*/true), "Fortran");
  ExpectRefused(NpyBytes(">f4", {2}, ""), "big-endian");
  ExpectRefused(NpyBytes("<U8", {2}, ""), "'<U8' is not a numeric dtype");
  ExpectRefused(NpyBytes("<c8", {2}, ""), "not a numeric dtype");
  ExpectRefused(NpyBytes("<f4", {2}, "").substr(0, 40), "truncated .npy header");
  std::string bad_shape = NpyBytes("<f4", {2}, "");
  bad_shape.replace(bad_shape.find("(2,)"), 4, "(-2,)");
  ExpectRefused(bad_shape, "malformed .npy shape");
  std::string no_shape = NpyBytes("<f4", {2}, "");
  no_shape.replace(no_shape.find("'shape'"), 7, "'shope'");
  ExpectRefused(no_shape, "unknown .npy header key 'shope'");
}

}  // namespace
}  // namespace herd
