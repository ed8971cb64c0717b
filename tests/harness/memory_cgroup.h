// A memory cgroup with a hard limit, for tests that prove a process stays
// within it: cgroup v2 (memory.max) where the memory controller is on the
// unified hierarchy, else cgroup v1 (memory.limit_in_bytes). Page cache is
// charged to the cgroup too, and the kernel reclaims clean file pages
// before it kills anything, so a process that maps more data than the limit
// survives exactly when its own (anonymous) memory stays below it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace herd::testing {

class MemoryCgroup {
 public:
  // A fresh cgroup named `name` (made unique with this pid) limited to
  // `limit_bytes`, or nullptr with `why` set where none can be made here.
  static std::unique_ptr<MemoryCgroup> Create(const std::string& name, int64_t limit_bytes, std::string* why);
  ~MemoryCgroup();  // removes it (its processes must have exited)

  // Prepended to a command line: the command runs inside the cgroup, and so
  // do its children (`sh -c 'echo $$ > cgroup.procs; exec "$@"'`).
  std::vector<std::string> ExecPrefix() const;

  const std::string& path() const { return path_; }
  bool v2() const { return v2_; }
  // Times the cgroup's usage reached its limit and the kernel reclaimed
  // instead (v1 memory.failcnt, v2 memory.events max).
  int64_t LimitHits() const;
  // Processes the kernel's OOM killer killed in it (v1 memory.oom_control
  // oom_kill, v2 memory.events oom_kill).
  int64_t OomKills() const;
  // The highest usage seen (v1 memory.max_usage_in_bytes, v2 memory.peak).
  int64_t PeakBytes() const;

 private:
  MemoryCgroup(std::string path, bool v2) : path_(std::move(path)), v2_(v2) {}
  int64_t KeyedValue(const std::string& file, const std::string& key) const;
  std::string path_;
  bool v2_;
};

}  // namespace herd::testing
