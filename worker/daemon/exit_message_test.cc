#include "worker/daemon/exit_message.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace herd::worker {
namespace {

class ExitMessageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("exit_message_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void Write(const std::string& name, const std::string& content) { std::ofstream(dir_ / name) << content; }
  std::string Read() { return ReadExitMessage((dir_ / "termination").string(), (dir_ / "log").string()); }

  std::filesystem::path dir_;
};

TEST_F(ExitMessageTest, PrefersTheTerminationMessage) {
  Write("termination", "loss became NaN at step 12\n");
  Write("log", "step 11\nstep 12\n");
  EXPECT_EQ(Read(), "loss became NaN at step 12");
}

TEST_F(ExitMessageTest, FallsBackToTheLastNonEmptyLogLine) {
  Write("termination", "  \n");
  Write("log", "step 11\nSegmentation fault  \n\n  \n");
  EXPECT_EQ(Read(), "Segmentation fault");
}

TEST_F(ExitMessageTest, EmptyWhenNothingWasWritten) { EXPECT_EQ(Read(), ""); }

TEST_F(ExitMessageTest, TruncatesTo4KiB) {
  Write("termination", std::string(10000, 'x'));
  EXPECT_EQ(Read(), std::string(kMaxExitMessageBytes, 'x'));
}

TEST_F(ExitMessageTest, LongLogsAreReadFromTheEnd) {
  Write("log", std::string(200000, 'a') + "\nlast words\n");
  EXPECT_EQ(Read(), "last words");
}

TEST(SanitizeUtf8Test, KeepsValidTextAndReplacesInvalidBytes) {
  EXPECT_EQ(SanitizeUtf8("h\xc3\xa9llo", 100), "h\xc3\xa9llo");
  EXPECT_EQ(SanitizeUtf8("a\xff" "b", 100), "a?b");
  EXPECT_EQ(SanitizeUtf8("a\xc3", 100), "a?");           // truncated sequence
  EXPECT_EQ(SanitizeUtf8("\xed\xa0\x80", 100), "???");  // surrogate
}

TEST(SanitizeUtf8Test, CutsOnACharacterBoundary) {
  EXPECT_EQ(SanitizeUtf8("ab\xc3\xa9", 3), "ab");
  EXPECT_EQ(SanitizeUtf8("ab\xc3\xa9", 4), "ab\xc3\xa9");
}

}  // namespace
}  // namespace herd::worker
