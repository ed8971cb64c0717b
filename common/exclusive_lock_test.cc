#include "common/exclusive_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace herd {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(ExclusiveLock, SecondHolderIsRefusedWithThePid) {
  const std::string path = TempPath("second.lock");
  auto first = ExclusiveLock::Acquire(path);
  ASSERT_TRUE(first.ok()) << first.status();
  // flock locks belong to open file descriptions: a second open in this
  // process conflicts just as another process would.
  auto second = ExclusiveLock::Acquire(path);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(path), std::string::npos) << second.status();
  EXPECT_NE(second.status().message().find("pid " + std::to_string(getpid())), std::string::npos) << second.status();
}

TEST(ExclusiveLock, ReleasedWhenDropped) {
  const std::string path = TempPath("dropped.lock");
  { auto first = ExclusiveLock::Acquire(path); ASSERT_TRUE(first.ok()); }
  EXPECT_TRUE(ExclusiveLock::Acquire(path).ok());
}

TEST(ExclusiveLock, ADeadHoldersLockDoesNotBlock) {
  const std::string path = TempPath("dead.lock");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto held = ExclusiveLock::Acquire(path);
    _exit(held.ok() ? 0 : 1);  // dies holding it, as a SIGKILLed coordinator would
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(ExclusiveLock::Acquire(path).ok());
}

TEST(ExclusiveLock, UnopenablePathIsNamed) {
  auto lock = ExclusiveLock::Acquire("/nonexistent-dir/x.lock");
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(lock.status().message().find("/nonexistent-dir/x.lock"), std::string::npos);
}

}  // namespace
}  // namespace herd
