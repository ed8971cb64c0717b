#include "bench/herd_binary.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace herd::bench {

std::string FindHerdBinary(const std::string& package_path, const char* argv0) {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots;
  for (const char* variable : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* value = std::getenv(variable)) roots.push_back(value);
  }
  if (argv0 != nullptr) roots.push_back(std::string(argv0) + ".runfiles");
  for (const fs::path& root : roots) {
    fs::path candidate = root / "herd" / package_path;
    if (fs::exists(candidate)) return fs::absolute(candidate).string();
  }
  return fs::absolute(fs::path("bazel-bin") / package_path).string();
}

}  // namespace herd::bench
