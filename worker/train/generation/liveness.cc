#include "worker/train/generation/liveness.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace herd {
namespace {

std::atomic<int> alive_fd{-1};
std::atomic<int64_t> last_touch_ms{0};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::Status SetAliveFile(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("--alive-file ", path, ": ", std::strerror(errno)));
  }
  alive_fd = fd;
  last_touch_ms = 0;
  MarkAlive();
  return absl::OkStatus();
}

void MarkAlive() {
  const int fd = alive_fd.load();
  if (fd < 0) return;
  const int64_t now = NowMs();
  int64_t last = last_touch_ms.load();
  if (now - last < 1000 && last != 0) return;
  if (!last_touch_ms.compare_exchange_strong(last, now)) return;  // another thread touches
  futimens(fd, nullptr);
}

absl::Status MarkJoined(int64_t generation) {
  const int fd = alive_fd.load();
  if (fd < 0) return absl::OkStatus();
  const std::string text = absl::StrCat(generation, "\n");
  if (pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ftruncate(fd, static_cast<off_t>(text.size())) != 0) {
    return absl::UnavailableError(absl::StrCat("recording generation ", generation, " in the alive file: ",
                                               std::strerror(errno)));
  }
  last_touch_ms = NowMs();  // the write moved the mtime too
  return absl::OkStatus();
}

}  // namespace herd
