#include "worker/comm/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace herd {

std::string FormatSocketAddress(const sockaddr* address, socklen_t length) {
  char host[INET6_ADDRSTRLEN] = {0};
  if (address->sa_family == AF_INET && length >= sizeof(sockaddr_in)) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
    return absl::StrCat(host, ":", ntohs(v4->sin_port));
  }
  if (address->sa_family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    return absl::StrCat("[", host, "]:", ntohs(v6->sin6_port));
  }
  return absl::StrCat("(address family ", address->sa_family, ")");
}

std::string PeerAddressOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "(unknown peer)";
  return FormatSocketAddress(reinterpret_cast<sockaddr*>(&address), length);
}

std::string LocalAddressOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "(unknown)";
  return FormatSocketAddress(reinterpret_cast<sockaddr*>(&address), length);
}

int LocalPortOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return -1;
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  return -1;
}

absl::Status SetNonBlocking(int fd, bool non_blocking) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return absl::InternalError(absl::StrCat("fcntl(F_GETFL): ", std::strerror(errno)));
  const int wanted = non_blocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, wanted) != 0) {
    return absl::InternalError(absl::StrCat("fcntl(F_SETFL): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::StatusOr<UniqueFd> ListenTcp(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("listen host '", host, "': ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || listen(fd.get(), SOMAXCONN) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    freeaddrinfo(found);
    return fd;
  }
  freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat("cannot listen on '", host, "' port ", port, ": ", last_error));
}

int PollMillisUntil(SteadyTime deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

ReadEnd ReadExactly(int fd, size_t bytes, SteadyTime deadline, std::string* out, int* errno_out) {
  const size_t goal = out->size() + bytes;
  while (out->size() < goal) {
    char buffer[256];
    const ssize_t n = recv(fd, buffer, std::min(sizeof(buffer), goal - out->size()), 0);
    if (n > 0) {
      out->append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return ReadEnd::kClosed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *errno_out = errno;
      return ReadEnd::kError;
    }
    const int wait = PollMillisUntil(deadline);
    if (wait == 0) return ReadEnd::kTimeout;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, wait) < 0 && errno != EINTR) {
      *errno_out = errno;
      return ReadEnd::kError;
    }
  }
  return ReadEnd::kComplete;
}

absl::Status WriteAll(int fd, const std::string& data, SteadyTime deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    const int wait = PollMillisUntil(deadline);
    if (wait == 0) return absl::DeadlineExceededError("send did not finish before the deadline");
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, wait);
  }
  return absl::OkStatus();
}

}  // namespace herd
