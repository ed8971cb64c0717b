#include "common/private_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace herd {

absl::Status CreatePrivateDir(const std::string& path) {
  std::error_code error;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (error) return absl::UnavailableError(absl::StrCat("cannot create ", parent.string(), ": ", error.message()));
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("cannot create state dir ", path, ": ", std::strerror(errno)));
  }
  struct stat info {};
  if (stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("state dir ", path, " is not a folder"));
  }
  return absl::OkStatus();
}

}  // namespace herd
