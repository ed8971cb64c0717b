#include "worker/daemon/log_tail.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace herd::worker {
namespace {

class TailOffsetTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& contents) {
    std::string path = ::testing::TempDir() + "/log-" + std::to_string(counter_++);
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }
  std::string Tail(const std::string& contents, int64_t lines) {
    auto offset = TailOffset(Write(contents), lines);
    EXPECT_TRUE(offset.ok()) << offset.status();
    return contents.substr(offset.value_or(0));
  }
  int counter_ = 0;
};

TEST_F(TailOffsetTest, LastLinesWithAndWithoutAFinalNewline) {
  EXPECT_EQ(Tail("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(Tail("a\nb\nc", 2), "b\nc");
  EXPECT_EQ(Tail("a\nb\nc\n", 1), "c\n");
  EXPECT_EQ(Tail("a\nb\nc\n", 3), "a\nb\nc\n");
  EXPECT_EQ(Tail("a\nb\nc\n", 10), "a\nb\nc\n");
  EXPECT_EQ(Tail("a\n\n\n", 2), "\n\n");  // empty lines count
  EXPECT_EQ(Tail("", 5), "");
}

TEST_F(TailOffsetTest, LinesAcrossReadBlocks) {
  std::string contents;
  for (int i = 0; i < 20000; ++i) contents += "line " + std::to_string(i) + " of a long trainer log\n";
  EXPECT_EQ(Tail(contents, 2), "line 19998 of a long trainer log\nline 19999 of a long trainer log\n");
  std::string last_5000 = Tail(contents, 5000);
  EXPECT_EQ(last_5000.rfind("line 15000 ", 0), 0u);
  EXPECT_EQ(std::count(last_5000.begin(), last_5000.end(), '\n'), 5000);
}

TEST_F(TailOffsetTest, ZeroMeansNothingAndAMissingFileIsNamed) {
  EXPECT_EQ(Tail("a\nb\n", 0), "");
  auto missing = TailOffset(::testing::TempDir() + "/no-such-log", 3);
  ASSERT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such-log"), std::string::npos);
}

}  // namespace
}  // namespace herd::worker
