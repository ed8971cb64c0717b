#include "common/auth.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace herd {
namespace {

TEST(Auth, TokensEqual) {
  EXPECT_TRUE(TokensEqual("s3cret", "s3cret"));
  EXPECT_FALSE(TokensEqual("s3cret", "s3creT"));
  EXPECT_FALSE(TokensEqual("s3cret", "s3cre"));
  EXPECT_FALSE(TokensEqual("", "x"));
}

TEST(Auth, ReadTokenFileTrimsAndRejectsEmpty) {
  std::string path = testing::TempDir() + "/token";
  std::ofstream(path) << "  abc123\n";
  auto token = ReadTokenFile(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "abc123");
  std::ofstream(path) << "\n \n";
  EXPECT_EQ(ReadTokenFile(path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace herd
