#include "worker/comm/peer_exchange.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/comm/tcp_socket.h"
#include "worker/comm/peer_fault.h"

namespace herd {

absl::Status ExchangeWithPeers(std::vector<PeerTransfer>& transfers,
                               std::chrono::steady_clock::time_point deadline) {
  return ExchangeWithPeers(transfers, deadline, nullptr);
}

absl::Status ExchangeWithPeers(std::vector<PeerTransfer>& transfers, std::chrono::steady_clock::time_point deadline,
                               const std::function<void(const std::vector<size_t>& received)>& on_received) {
  std::vector<size_t> sent(transfers.size(), 0), received(transfers.size(), 0);
  std::vector<pollfd> polled;
  std::vector<size_t> index;
  while (true) {
    polled.clear();
    index.clear();
    for (size_t i = 0; i < transfers.size(); ++i) {
      const PeerTransfer& t = transfers[i];
      short events = 0;
      if (sent[i] < t.send_bytes) events |= POLLOUT;
      if (received[i] < t.receive_bytes) events |= POLLIN;
      if (events == 0) continue;
      polled.push_back({t.fd, events, 0});
      index.push_back(i);
    }
    if (polled.empty()) return absl::OkStatus();
    const int wait = PollMillisUntil(deadline);
    const int ready = wait == 0 ? 0 : poll(polled.data(), polled.size(), wait);
    if (ready < 0 && errno != EINTR) return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    if (ready == 0) {
      const size_t i = index.front();
      return PeerLateError(transfers[i].rank,
                           absl::StrCat("rank ", transfers[i].rank, " did not answer in time: sent ", sent[i], " of ",
                                        transfers[i].send_bytes, " bytes, received ", received[i], " of ",
                                        transfers[i].receive_bytes));
    }
    bool arrived = false;
    for (size_t k = 0; k < polled.size(); ++k) {
      if (polled[k].revents == 0) continue;
      const size_t i = index[k];
      PeerTransfer& t = transfers[i];
      if (received[i] < t.receive_bytes && (polled[k].revents & (POLLIN | POLLHUP | POLLERR))) {
        const ssize_t n = recv(t.fd, t.receive + received[i], t.receive_bytes - received[i], 0);
        if (n == 0) return PeerClosedError(t.rank);
        if (n > 0) {
          received[i] += static_cast<size_t>(n);
          arrived = true;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return PeerSocketError(t.rank, errno,
                                 absl::StrCat("receiving from rank ", t.rank, ": ", std::strerror(errno)));
        }
      }
      if (sent[i] < t.send_bytes && (polled[k].revents & (POLLOUT | POLLHUP | POLLERR))) {
        const ssize_t n = send(t.fd, t.send + sent[i], t.send_bytes - sent[i], MSG_NOSIGNAL);
        if (n > 0) {
          sent[i] += static_cast<size_t>(n);
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return PeerSocketError(t.rank, errno,
                                 absl::StrCat("sending to rank ", t.rank, ": ", std::strerror(errno)));
        }
      }
    }
    if (arrived && on_received) on_received(received);
  }
}

}  // namespace herd
