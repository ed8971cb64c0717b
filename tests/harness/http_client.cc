#include "tests/harness/http_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace herd::testing {
namespace {

// Closes the socket on every path out.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& address, const std::string& target,
                                     std::chrono::milliseconds timeout) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("no port in ", address));
  const std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", address, ": ", gai_strerror(rc)));
  }
  Socket sock(socket(found->ai_family, found->ai_socktype, found->ai_protocol));
  if (sock.fd() < 0) {
    freeaddrinfo(found);
    return Errno("socket");
  }
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  setsockopt(sock.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(sock.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int connected = connect(sock.fd(), found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (connected != 0) return Errno(absl::StrCat("connect ", address));

  const std::string request =
      absl::StrCat("GET ", target, " HTTP/1.0\r\nHost: ", address, "\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = send(sock.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return Errno(absl::StrCat("send to ", address));
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buffer[16384];
  while (true) {
    ssize_t n = recv(sock.fd(), buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) return Errno(absl::StrCat("read from ", address));
    raw.append(buffer, static_cast<size_t>(n));
  }

  // "HTTP/1.x CODE REASON\r\n" headers "\r\n\r\n" body
  const size_t header_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/", 0) != 0 || header_end == std::string::npos) {
    return absl::DataLossError(absl::StrCat("not an HTTP response from ", address, ": ", raw.substr(0, 200)));
  }
  HttpResponse response;
  const size_t space = raw.find(' ');
  if (space == std::string::npos || !absl::SimpleAtoi(raw.substr(space + 1, 3), &response.status)) {
    return absl::DataLossError(absl::StrCat("bad status line from ", address));
  }
  response.body = raw.substr(header_end + 4);
  return response;
}

std::string UrlEncode(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

int FreeLoopbackPort() {
  Socket sock(socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 0;
  socklen_t len = sizeof(addr);
  getsockname(sock.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

}  // namespace herd::testing
