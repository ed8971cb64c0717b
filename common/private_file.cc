#include "common/private_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace herd {
namespace {

bool InMyGroups(gid_t gid) {
  if (gid == getegid()) return true;
  int count = getgroups(0, nullptr);
  if (count <= 0) return false;
  std::vector<gid_t> groups(count);
  count = getgroups(count, groups.data());
  for (int i = 0; i < count; ++i) {
    if (groups[i] == gid) return true;
  }
  return false;
}

}  // namespace

absl::Status CheckPrivateFile(const std::string& path, const std::string& what) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    const int error = errno;
    std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  if (!S_ISREG(info.st_mode)) return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": not a regular file"));
  const mode_t mode = info.st_mode & 07777;
  // A Secret volume's file: root's, shared with the pod's fsGroup on purpose.
  const bool shared_with_my_group = info.st_uid != geteuid() && InMyGroups(info.st_gid);
  const mode_t forbidden = shared_with_my_group ? (S_IWGRP | S_IRWXO) : (S_IRWXG | S_IRWXO);
  if ((mode & forbidden) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s %s: permissions %04o are too open: it holds a secret, so group and others must not read it "
        "(chmod 600 %s)",
        what, path, mode, path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadPrivateFile(const std::string& path, const std::string& what) {
  if (auto status = CheckPrivateFile(path, what); !status.ok()) return status;
  std::ifstream in(path);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(what, " ", path, ": cannot be read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace herd
