#include "common/control_chars.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(ControlChars, FindsC0DelAndC1ButNotPrintableUnicode) {
  EXPECT_FALSE(HasControlChars("resnet-small_v2 (batch 64)"));
  EXPECT_FALSE(HasControlChars("modèle ▇▇ 学习"));
  EXPECT_TRUE(HasControlChars("a\x1b[2Jb"));
  EXPECT_TRUE(HasControlChars("title\x1b]0;pwned\x07"));
  EXPECT_TRUE(HasControlChars("new\nline"));
  EXPECT_TRUE(HasControlChars("tab\there"));
  EXPECT_TRUE(HasControlChars(std::string("nul\0byte", 8)));
  EXPECT_TRUE(HasControlChars("del\x7f"));
  EXPECT_TRUE(HasControlChars("csi\xc2\x9b" "2J"));  // U+009B, the 8-bit CSI
}

TEST(ControlChars, EscapesToInertUnambiguousText) {
  EXPECT_EQ(EscapeControlChars("plain ▇ text"), "plain ▇ text");
  EXPECT_EQ(EscapeControlChars("\x1b]0;pwned\x07\x1b[2J"), "\\x1b]0;pwned\\x07\\x1b[2J");
  EXPECT_EQ(EscapeControlChars("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(EscapeControlChars("back\\slash"), "back\\\\slash");
  EXPECT_EQ(EscapeControlChars("\xc2\x9b" "2J"), "\\u009b2J");
  EXPECT_FALSE(HasControlChars(EscapeControlChars("\x1b\x07\n\x7f\xc2\x85")));
}

}  // namespace
}  // namespace herd
