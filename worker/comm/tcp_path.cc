#include "worker/comm/tcp_path.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace herd {
namespace {

std::string CongestionControlOf(int fd) {
  char name[32] = {0};
  socklen_t length = sizeof(name);
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &length) != 0) return "";
  return std::string(name, strnlen(name, std::min<size_t>(length, sizeof(name))));
}

}  // namespace

TcpPath ReadTcpPath(int fd) {
  TcpPath path;
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) == 0) {
    path.window_bytes = static_cast<int64_t>(info.tcpi_snd_cwnd) * info.tcpi_snd_mss;
    path.rtt_seconds = info.tcpi_rtt / 1e6;
    path.rto_seconds = info.tcpi_rto / 1e6;
  }
  return path;
}

std::string UseCongestionControl(int fd, const std::string& wanted, std::string* note) {
  if (!wanted.empty() &&
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, wanted.data(), static_cast<socklen_t>(wanted.size())) != 0) {
    const int error = errno;
    if (note != nullptr) {
      *note = absl::StrCat("TCP congestion control ", wanted, " unavailable (",
                           error == ENOENT ? "not loaded in this kernel"
                           : error == EPERM ? "not in net.ipv4.tcp_allowed_congestion_control for this process"
                                            : std::strerror(error),
                           ")");
    }
  }
  return CongestionControlOf(fd);
}

}  // namespace herd
