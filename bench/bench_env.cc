#include "bench/bench_env.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

namespace herd::bench {

nlohmann::json MachineSnapshot() {
  double load = -1;
  std::ifstream("/proc/loadavg") >> load;
  return {{"cpus", std::thread::hardware_concurrency()}, {"loadavg_1m", load}};
}

std::string MakeTempDir(const std::string& tag) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(root != nullptr ? root : "/tmp") + "/herd-" + tag + "-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  return mkdtemp(buffer.data()) != nullptr ? std::string(buffer.data()) : "";
}

}  // namespace herd::bench
