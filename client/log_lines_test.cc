#include "client/log_lines.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace herd::client {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(const std::vector<std::string>& chunks) {
  std::vector<std::string> lines;
  LogLines splitter([&](absl::string_view line) { lines.emplace_back(line); });
  for (const std::string& chunk : chunks) splitter.Add(chunk);
  splitter.Finish();
  return lines;
}

TEST(LogLinesTest, ChunksCutAnywhereGiveTheSameLines) {
  EXPECT_THAT(Split({"step 1 loss 2.3\nstep 2 loss 2.1\n"}), ElementsAre("step 1 loss 2.3", "step 2 loss 2.1"));
  EXPECT_THAT(Split({"step 1 lo", "ss 2.3\nst", "ep 2", " loss 2.1\n"}), ElementsAre("step 1 loss 2.3", "step 2 loss 2.1"));
  EXPECT_THAT(Split({"a\n", "\n", "b"}), ElementsAre("a", "", "b"));  // empty lines kept, last line without newline
  EXPECT_THAT(Split({"\xc2", "\x9b" "x\n"}), ElementsAre("\xc2\x9bx"));  // a UTF-8 character split across chunks
  EXPECT_THAT(Split({}), ElementsAre());
}

}  // namespace
}  // namespace herd::client
