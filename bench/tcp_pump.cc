#include "bench/tcp_pump.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace herd::bench {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
}

sockaddr_in Loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

absl::Status WriteAll(int fd, const char* data, size_t bytes) {
  while (bytes > 0) {
    ssize_t n = write(fd, data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("pump write");
    data += n;
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* data, size_t bytes) {
  while (bytes > 0) {
    ssize_t n = read(fd, data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("pump read");
    data += n;
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TcpPump> TcpPump::Connect(int rank, RendezvousStore& store, const std::string& key,
                                         std::chrono::milliseconds timeout) {
  if (rank > 1) return TcpPump(rank, -1);
  int fd = -1;
  if (rank == 0) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0) return Errno("socket");
    sockaddr_in address = Loopback(0);
    socklen_t length = sizeof(address);
    if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(listener, 1) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      close(listener);
      return Errno("pump listen");
    }
    if (auto status = store.Set(key, std::to_string(ntohs(address.sin_port))); !status.ok()) {
      close(listener);
      return status;
    }
    fd = accept(listener, nullptr, nullptr);
    close(listener);
    if (fd < 0) return Errno("pump accept");
  } else {
    std::string port;
    if (auto status = store.Get(key, timeout, &port); !status.ok()) return status;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return Errno("socket");
    sockaddr_in address = Loopback(std::stoi(port));
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      close(fd);
      return Errno("pump connect");
    }
  }
  // Like Gloo's pairs: no Nagle delay on the small acknowledgement, and the
  // receive buffer left to the kernel's autotuning.
  int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  return TcpPump(rank, fd);
}

TcpPump::TcpPump(TcpPump&& other) noexcept : rank_(other.rank_), fd_(other.fd_) { other.fd_ = -1; }

TcpPump::~TcpPump() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<double> TcpPump::Run(char* buffer, size_t bytes, int reps) {
  char ack = 0;
  if (rank_ == 0) {
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i) {
      if (auto status = WriteAll(fd_, buffer, bytes); !status.ok()) return status;
    }
    if (auto status = ReadAll(fd_, &ack, 1); !status.ok()) return status;
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  if (rank_ == 1) {
    for (int i = 0; i < reps; ++i) {
      if (auto status = ReadAll(fd_, buffer, bytes); !status.ok()) return status;
    }
    if (auto status = WriteAll(fd_, &ack, 1); !status.ok()) return status;
  }
  return 0.0;
}

}  // namespace herd::bench
