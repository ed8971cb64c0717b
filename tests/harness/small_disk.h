// A small tmpfs for tests of storage trouble: too small for a checkpoint, or
// filled up and freed again, or remounted read-only. Needs root (the test's
// sandbox has its own mount namespace, which the mount ends with).
#pragma once

#include <string>

namespace herd::testing {

class SmallDisk {
 public:
  // Mounts a tmpfs of `size` ("48k", "8m") at TEST_TMPDIR/`name`.
  explicit SmallDisk(const std::string& size, const std::string& name = "disk");
  ~SmallDisk();  // unmounts
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;

  void MakeReadOnly();
  // Writes a filler file until the disk is full (ENOSPC); Free() removes it.
  void Fill();
  void Free();
  const std::string& dir() const { return dir_; }
  bool mounted() const { return mounted_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};

}  // namespace herd::testing
