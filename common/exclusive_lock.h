// An exclusive, advisory lock on a file (flock): held while the process
// lives, released by the kernel when it dies, so a crashed holder never
// blocks the next start. Used so two coordinators never share a state dir.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace herd {

class ExclusiveLock {
 public:
  // Takes the lock on `path` (created if missing) without waiting. Fails with
  // FAILED_PRECONDITION naming the path and the holder's pid when another
  // live process holds it.
  static absl::StatusOr<ExclusiveLock> Acquire(const std::string& path);

  ExclusiveLock(ExclusiveLock&& other) noexcept;
  ExclusiveLock& operator=(ExclusiveLock&& other) noexcept;
  ExclusiveLock(const ExclusiveLock&) = delete;
  ExclusiveLock& operator=(const ExclusiveLock&) = delete;
  ~ExclusiveLock();

 private:
  explicit ExclusiveLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace herd
