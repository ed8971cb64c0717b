#include "worker/daemon/log_tail.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace herd::worker {

absl::StatusOr<int64_t> TailOffset(const std::string& path, int64_t lines) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) {
    std::string why = std::strerror(errno);
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": ", why));
    return absl::InternalError(absl::StrCat(path, ": ", why));
  }
  const int64_t size = file.tellg();
  if (lines <= 0 || size == 0) return lines <= 0 ? size : 0;
  constexpr int64_t kBlock = 64 * 1024;
  std::vector<char> block(kBlock);
  int64_t end = size;
  int64_t newlines = 0;
  // A final newline ends the last line; it does not start another.
  bool skip_final_newline = true;
  while (end > 0) {
    int64_t begin = std::max<int64_t>(0, end - kBlock);
    file.seekg(begin);
    file.read(block.data(), end - begin);
    if (!file) return absl::InternalError(absl::StrCat(path, ": read failed"));
    for (int64_t i = end - begin - 1; i >= 0; --i) {
      if (block[i] != '\n') {
        skip_final_newline = false;
        continue;
      }
      if (skip_final_newline) {
        skip_final_newline = false;
        continue;
      }
      if (++newlines == lines) return begin + i + 1;
    }
    end = begin;
  }
  return 0;
}

}  // namespace herd::worker
