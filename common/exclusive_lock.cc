#include "common/exclusive_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace herd {

absl::StatusOr<ExclusiveLock> ExclusiveLock::Acquire(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open lock file ", path, ": ", strerror(errno)));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char buffer[32] = {};
    const ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, 0);
    close(fd);
    if (error != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("cannot lock ", path, ": ", strerror(error)));
    }
    int64_t pid = 0;
    const bool known = n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buffer, n)), &pid);
    return absl::FailedPreconditionError(absl::StrCat(path, " is locked by another running process",
                                                      known ? absl::StrCat(" (pid ", pid, ")") : std::string()));
  }
  // The holder's pid, for the message a second process gets.
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot write lock file ", path, ": ", strerror(error)));
  }
  return ExclusiveLock(fd);
}

ExclusiveLock::ExclusiveLock(ExclusiveLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

ExclusiveLock& ExclusiveLock::operator=(ExclusiveLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

ExclusiveLock::~ExclusiveLock() {
  if (fd_ >= 0) close(fd_);  // closing releases the flock
}

}  // namespace herd
