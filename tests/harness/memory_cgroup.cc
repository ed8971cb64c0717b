#include "tests/harness/memory_cgroup.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace herd::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool WriteValue(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  out.flush();
  return static_cast<bool>(out);
}

// This process's cgroup v2 path ("0::/a/b"), or "" outside one.
std::string OwnUnifiedCgroup() {
  std::istringstream lines(ReadAll("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

}  // namespace

std::unique_ptr<MemoryCgroup> MemoryCgroup::Create(const std::string& name, int64_t limit_bytes, std::string* why) {
  const std::string unique = name + "-" + std::to_string(::getpid());
  std::error_code error;
  // v2: a child of a cgroup whose subtree has the memory controller on.
  const std::string unified_controllers = ReadAll("/sys/fs/cgroup/cgroup.controllers");
  if (unified_controllers.find("memory") != std::string::npos) {
    const std::string own = "/sys/fs/cgroup" + OwnUnifiedCgroup();
    for (const std::string& parent : {own, std::string("/sys/fs/cgroup")}) {
      if (ReadAll(parent + "/cgroup.subtree_control").find("memory") == std::string::npos) continue;
      const std::string path = parent + "/" + unique;
      if (!std::filesystem::create_directory(path, error)) continue;
      if (WriteValue(path + "/memory.max", std::to_string(limit_bytes)) && WriteValue(path + "/memory.swap.max", "0")) {
        return std::unique_ptr<MemoryCgroup>(new MemoryCgroup(path, true));
      }
      std::filesystem::remove(path, error);
    }
  }
  const std::string v1 = "/sys/fs/cgroup/memory";
  if (std::filesystem::exists(v1 + "/memory.limit_in_bytes")) {
    const std::string path = v1 + "/" + unique;
    if (std::filesystem::create_directory(path, error) &&
        WriteValue(path + "/memory.limit_in_bytes", std::to_string(limit_bytes))) {
      WriteValue(path + "/memory.swappiness", "0");  // no swap either way: file pages are what goes
      return std::unique_ptr<MemoryCgroup>(new MemoryCgroup(path, false));
    }
    std::filesystem::remove(path, error);
  }
  *why = "no writable memory cgroup (v2 memory controller or v1 /sys/fs/cgroup/memory)";
  return nullptr;
}

MemoryCgroup::~MemoryCgroup() {
  std::error_code error;
  std::filesystem::remove(path_, error);
}

std::vector<std::string> MemoryCgroup::ExecPrefix() const {
  return {"/bin/sh", "-c", "echo $$ > '" + path_ + "/cgroup.procs' && exec \"$@\"", "sh"};
}

int64_t MemoryCgroup::KeyedValue(const std::string& file, const std::string& key) const {
  std::istringstream lines(ReadAll(path_ + "/" + file));
  for (std::string k; lines >> k;) {
    int64_t value = 0;
    lines >> value;
    if (k == key) return value;
  }
  return -1;
}

int64_t MemoryCgroup::LimitHits() const {
  if (v2_) return KeyedValue("memory.events", "max");
  return std::stoll("0" + ReadAll(path_ + "/memory.failcnt"));
}

int64_t MemoryCgroup::OomKills() const {
  return v2_ ? KeyedValue("memory.events", "oom_kill") : KeyedValue("memory.oom_control", "oom_kill");
}

int64_t MemoryCgroup::PeakBytes() const {
  return std::stoll("0" + ReadAll(path_ + (v2_ ? "/memory.peak" : "/memory.max_usage_in_bytes")));
}

}  // namespace herd::testing
