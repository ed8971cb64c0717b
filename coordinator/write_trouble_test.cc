#include "coordinator/write_trouble.h"

#include <gtest/gtest.h>

namespace herd::coordinator {
namespace {

TEST(WriteTrouble, TheFirstFailureStartsASpell) {
  WriteTrouble trouble;
  EXPECT_TRUE(NoteWriteFailure(trouble, "sqlite step: database or disk is full", 100));
  EXPECT_FALSE(NoteWriteFailure(trouble, "sqlite step: disk I/O error", 101));
  EXPECT_EQ(trouble.since, 100);
  EXPECT_EQ(trouble.last_attempt, 101);
  EXPECT_EQ(trouble.failures, 2);
  EXPECT_EQ(trouble.error, "sqlite step: disk I/O error");
}

TEST(WriteTrouble, RetriesBackOffUpToEightSeconds) {
  WriteTrouble trouble;
  double now = 0;
  const double expected[] = {0.5, 1, 2, 4, 8, 8, 8};
  for (double wait : expected) {
    NoteWriteFailure(trouble, "full", now);
    EXPECT_DOUBLE_EQ(NextWriteAttempt(trouble) - now, wait) << trouble.failures;
    now = NextWriteAttempt(trouble);
  }
  for (int i = 0; i < 100; ++i) NoteWriteFailure(trouble, "full", now);
  EXPECT_DOUBLE_EQ(NextWriteAttempt(trouble) - now, 8);
}

TEST(WriteTrouble, TheWarningSaysSinceWhenAndWhy) {
  WriteTrouble trouble;
  NoteWriteFailure(trouble, "sqlite step: database or disk is full", 1795000000);  // 2026-11-18 11:06:40 UTC
  const std::string warning = StorageWarning(trouble);
  EXPECT_NE(warning.find("cannot persist"), std::string::npos) << warning;
  EXPECT_NE(warning.find("since 2026-11-18 11:06:40 UTC"), std::string::npos) << warning;
  EXPECT_NE(warning.find("database or disk is full"), std::string::npos) << warning;
}

}  // namespace
}  // namespace herd::coordinator
