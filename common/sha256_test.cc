#include "common/sha256.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(Sha256Stream, PiecesGiveTheDigestOfTheWhole) {
  std::string whole;
  for (int i = 0; i < 5000; ++i) whole.push_back(static_cast<char>(i * 31));
  Sha256Stream stream;
  for (size_t at = 0; at < whole.size(); at += 777) stream.Update(absl::string_view(whole).substr(at, 777));
  EXPECT_EQ(stream.FinishHex(), Sha256Hex(whole));
}

TEST(Sha256Stream, NothingGivenIsTheEmptyDigest) {
  Sha256Stream stream;
  EXPECT_EQ(stream.FinishHex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace herd
