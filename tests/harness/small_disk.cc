#include "tests/harness/small_disk.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "tests/harness/process.h"

namespace herd::testing {

using std::chrono::seconds;

SmallDisk::SmallDisk(const std::string& size, const std::string& name)
    : dir_(std::string(std::getenv("TEST_TMPDIR")) + "/" + name) {
  std::filesystem::create_directories(dir_);
  CommandResult mounted = RunCommand({"/bin/mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", dir_}, seconds(10));
  mounted_ = mounted.exit_code == 0;
  EXPECT_TRUE(mounted_) << "cannot mount a tmpfs (the test needs root): " << mounted.out << mounted.err;
}

SmallDisk::~SmallDisk() {
  if (mounted_) RunCommand({"/bin/umount", "-l", dir_}, seconds(10));
}

void SmallDisk::MakeReadOnly() {
  CommandResult done = RunCommand({"/bin/mount", "-o", "remount,ro", dir_}, seconds(10));
  EXPECT_EQ(done.exit_code, 0) << done.out << done.err;
}

void SmallDisk::Fill() {
  const std::string path = dir_ + "/filler";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  ASSERT_GE(fd, 0) << path;
  // Big writes first, then single bytes for what is left.
  for (size_t chunk : {size_t{1} << 20, size_t{4096}, size_t{1}}) {
    std::vector<char> zeros(chunk, 0);
    while (write(fd, zeros.data(), zeros.size()) > 0) {
    }
    EXPECT_EQ(errno, ENOSPC);
  }
  close(fd);
}

void SmallDisk::Free() { std::filesystem::remove(dir_ + "/filler"); }

}  // namespace herd::testing
