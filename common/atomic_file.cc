#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace herd {
namespace {

absl::Status Failed(const std::string& what, const std::string& path, int error) {
  return absl::UnavailableError(absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(error)));
}

std::string Folder(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents, AtomicWriteOptions options) {
  const std::string temporary = absl::StrCat(path, ".tmp.", getpid());
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Failed("write", path, errno);
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      close(fd);
      std::remove(temporary.c_str());
      return Failed("write", path, error);
    }
    written += static_cast<size_t>(n);
  }
  if ((options.durable && fsync(fd) != 0) || close(fd) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    return Failed("write", path, error);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    return Failed("replace", path, error);
  }
  if (options.durable) {
    const int folder = open(Folder(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (folder < 0) return Failed("sync the folder of", path, errno);
    const bool synced = fsync(folder) == 0;
    const int error = errno;
    close(folder);
    if (!synced) return Failed("sync the folder of", path, error);
  }
  return absl::OkStatus();
}

}  // namespace herd
