#include "worker/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace herd {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& field, const std::string& path) {
  auto error = [&](absl::StatusCode code, const std::string& what) {
    return absl::Status(code, absl::StrCat(field, " ", path, ": ", what));
  };
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": empty path"));
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) return error(absl::StatusCode::kNotFound, "no such file");
    if (e == EACCES || e == EPERM) {
      return error(absl::StatusCode::kPermissionDenied,
                   "permission denied: trainers read data with the worker's own rights (docs/security.md)");
    }
    return error(absl::StatusCode::kInvalidArgument, absl::StrCat("cannot open: ", std::strerror(e)));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return error(absl::StatusCode::kInvalidArgument, "not a regular file");
  }
  if (info.st_size == 0) {
    ::close(fd);
    return error(absl::StatusCode::kInvalidArgument, "the file is empty");
  }
  void* data = ::mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);  // the mapping keeps the file open
  if (data == MAP_FAILED) return error(absl::StatusCode::kInvalidArgument, absl::StrCat("mmap: ", std::strerror(e)));
  // Samples are read at random positions: without this, each page fault
  // reads the device's whole read-ahead window around it (8 MB on some
  // virtual disks) for a window of a few KB. Pages already cached are
  // unaffected, so a file in the page cache gathers as fast as memory.
  ::madvise(data, static_cast<size_t>(info.st_size), MADV_RANDOM);
  return std::unique_ptr<MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(data), info.st_size));
}

MappedFile::~MappedFile() { ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_)); }

}  // namespace herd
