#include "worker/comm/tcp_mesh_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/comm/peer_fault.h"
#include "worker/comm/tcp_socket.h"

namespace herd {

struct TcpMeshListener::Handshake {
  UniqueFd fd;
  std::string peer;
  SteadyTime deadline;
  HandshakeNonce nonce{};
  std::string out;  // challenge, then confirm
  size_t sent = 0;
  std::string in;   // the response as it arrives
  bool confirming = false;  // the response verified; sending the confirm
  int rank = -1;
};

std::string AuditLine(const RejectedConnection& rejected) {
  return absl::StrCat("audit: data-plane connection from ", rejected.peer, " refused (",
                      RejectReasonName(rejected.reason), "): ", rejected.detail);
}

absl::StatusOr<std::unique_ptr<TcpMeshListener>> TcpMeshListener::Start(TcpMeshListenerOptions options) {
  if (options.params.world_size < 1 || options.rank < 0 || options.rank >= options.params.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("tcp mesh listener: rank ", options.rank, " outside a world of ",
                                                   options.params.world_size));
  }
  if (options.handshake_timeout <= std::chrono::milliseconds::zero() || options.max_handshakes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tcp mesh listener: handshake_timeout ",
                                                   options.handshake_timeout.count(), " ms and max_handshakes ",
                                                   options.max_handshakes, " must both be positive"));
  }
  absl::StatusOr<UniqueFd> listen_fd = ListenTcp(options.host, options.port);
  if (!listen_fd.ok()) return listen_fd.status();
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("tcp mesh listener: pipe2: ", std::strerror(errno)));
  }
  return std::unique_ptr<TcpMeshListener>(new TcpMeshListener(std::move(options), std::move(*listen_fd),
                                                            UniqueFd(pipe_fds[0]), UniqueFd(pipe_fds[1])));
}

TcpMeshListener::TcpMeshListener(TcpMeshListenerOptions options, UniqueFd listen_fd, UniqueFd wake_read,
                               UniqueFd wake_write)
    : options_(std::move(options)),
      listen_fd_(std::move(listen_fd)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)),
      port_(LocalPortOf(listen_fd_.get())) {
  thread_ = std::thread([this] { Loop(); });
}

TcpMeshListener::~TcpMeshListener() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  const char byte = 0;
  (void)!write(wake_write_.get(), &byte, 1);
  thread_.join();
}

absl::StatusOr<UniqueFd> TcpMeshListener::TakePeer(int peer_rank, std::chrono::milliseconds timeout) {
  if (peer_rank < 0 || peer_rank >= options_.params.world_size || peer_rank == options_.rank) {
    return absl::InvalidArgumentError(absl::StrCat("TakePeer: peer_rank ", peer_rank, " (world of ",
                                                   options_.params.world_size, ", this is rank ", options_.rank, ")"));
  }
  UniqueFd fd;
  {
    absl::MutexLock lock(&mu_);
    auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ready_.count(peer_rank) > 0 || taken_.count(peer_rank) > 0;
    };
    mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::FromChrono(timeout));
    auto ready = ready_.find(peer_rank);
    if (ready == ready_.end()) {
      if (taken_.count(peer_rank) > 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("TakePeer: rank ", peer_rank, "'s socket was already taken"));
      }
      // It never reached us: blamed late, so the coordinator leaves it out
      // (a peer cut off from this one, though both reach the coordinator).
      return PeerLateError(peer_rank, absl::StrCat("rank ", peer_rank, " did not connect and prove the member key to ",
                                                   "rank ", options_.rank, " within ", timeout.count(), " ms"));
    }
    fd = std::move(ready->second);
    ready_.erase(ready);
    taken_.insert(peer_rank);
  }
  if (absl::Status status = SetNonBlocking(fd.get(), false); !status.ok()) return status;
  return fd;
}

void TcpMeshListener::Loop() {
  std::vector<std::unique_ptr<Handshake>> handshakes;
  std::vector<pollfd> polled;
  // After an accept error other than "none left" (out of file descriptors,
  // say), the listening socket stays readable: pause accepting briefly
  // rather than spin.
  SteadyTime accept_paused_until{};
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    const bool accepting = std::chrono::steady_clock::now() >= accept_paused_until;
    SteadyTime next_deadline = accepting ? SteadyTime::max() : accept_paused_until;
    polled.clear();
    polled.push_back({wake_read_.get(), POLLIN, 0});
    polled.push_back({listen_fd_.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    for (const auto& h : handshakes) {
      short events = h->confirming ? 0 : POLLIN;
      if (h->sent < h->out.size()) events |= POLLOUT;
      polled.push_back({h->fd.get(), events, 0});
      next_deadline = std::min(next_deadline, h->deadline);
    }
    const int wait = next_deadline == SteadyTime::max() ? -1 : PollMillisUntil(next_deadline);
    if (poll(polled.data(), polled.size(), wait) < 0 && errno != EINTR) return;

    // Handshakes first (their pollfds follow the two fixed ones), then new
    // connections, so indexes still match.
    const SteadyTime now = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<Handshake>> still;
    for (size_t i = 0; i < handshakes.size(); ++i) {
      Handshake* h = handshakes[i].get();
      const short revents = polled[i + 2].revents;
      if (revents != 0 && !Advance(h, revents)) continue;
      if (now >= h->deadline) {
        Refuse(h, RejectReason::kTimeout,
               absl::StrCat(h->confirming ? "confirm not delivered" : "no proof of the member key", " within ",
                            options_.handshake_timeout.count(), " ms (", h->in.size(), " bytes received)"));
        continue;
      }
      still.push_back(std::move(handshakes[i]));
    }
    handshakes.swap(still);
    if (polled[1].revents != 0 && !AcceptAll(&handshakes)) {
      accept_paused_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    }
    if (polled[0].revents != 0) {
      char drain[16];
      while (read(wake_read_.get(), drain, sizeof(drain)) > 0) {
      }
    }
  }
}

bool TcpMeshListener::AcceptAll(std::vector<std::unique_ptr<Handshake>>* handshakes) {
  while (true) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    const int fd = accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&address), &length,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // None left, or a connection that died in the backlog: fine.
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED;
    }
    auto h = std::make_unique<Handshake>();
    h->fd.reset(fd);
    h->peer = FormatSocketAddress(reinterpret_cast<sockaddr*>(&address), length);
    if (handshakes->size() >= options_.max_handshakes) {
      Refuse(h.get(), RejectReason::kOverloaded,
             absl::StrCat(handshakes->size(), " handshakes already in progress (max_handshakes)"));
      continue;
    }
    absl::StatusOr<HandshakeNonce> nonce = NewHandshakeNonce();
    if (!nonce.ok()) {
      Refuse(h.get(), RejectReason::kIoError, std::string(nonce.status().message()));
      continue;
    }
    h->nonce = *nonce;
    h->deadline = std::chrono::steady_clock::now() + options_.handshake_timeout;
    h->out = EncodeChallenge(options_.params, options_.rank, h->nonce);
    if (Advance(h.get(), POLLOUT)) handshakes->push_back(std::move(h));
  }
}

bool TcpMeshListener::Advance(Handshake* h, short revents) {
  // Send what is queued (the challenge, or the confirm).
  while (h->sent < h->out.size()) {
    const ssize_t n = send(h->fd.get(), h->out.data() + h->sent, h->out.size() - h->sent, MSG_NOSIGNAL);
    if (n > 0) {
      h->sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else if (n < 0 && errno != EINTR) {
      Refuse(h, RejectReason::kIoError, absl::StrCat("send: ", std::strerror(errno)));
      return false;
    }
  }
  if (h->confirming) {
    if (h->sent < h->out.size()) return true;
    const int rank = h->rank;
    confirming_.erase(rank);
    h->confirming = false;
    if (!Admit(rank, std::move(h->fd))) {
      Refuse(h, RejectReason::kDuplicateRank, absl::StrCat("rank ", rank, " is already connected"));
    }
    return false;
  }
  if ((revents & (POLLIN | POLLHUP | POLLERR)) == 0) return true;

  // Read the response; one byte past it, if already there, is a fault.
  char buffer[kResponseBytes + 1];
  const ssize_t n = recv(h->fd.get(), buffer, kResponseBytes + 1 - h->in.size(), 0);
  if (n == 0) {
    Refuse(h, RejectReason::kTruncated,
           absl::StrCat("closed after ", h->in.size(), " of ", kResponseBytes, " response bytes"));
    return false;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
    Refuse(h, RejectReason::kIoError, absl::StrCat("recv: ", std::strerror(errno)));
    return false;
  }
  h->in.append(buffer, static_cast<size_t>(n));
  if (HandshakeVerdict verdict = CheckFramePrefix(h->in, HandshakeFrame::kResponse); !verdict.ok()) {
    Refuse(h, verdict.reason, verdict.detail);
    return false;
  }
  if (h->in.size() < kResponseBytes) return true;
  // The connector sends nothing after its response until our confirm.
  char extra;
  if (h->in.size() == kResponseBytes && recv(h->fd.get(), &extra, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
    h->in.push_back(extra);
  }
  AcceptedResponse accepted;
  if (HandshakeVerdict verdict = CheckResponse(options_.params, options_.rank, h->nonce, h->in, &accepted);
      !verdict.ok()) {
    Refuse(h, verdict.reason, verdict.detail);
    return false;
  }
  if (RankClaimed(accepted.connector_rank)) {
    Refuse(h, RejectReason::kDuplicateRank, absl::StrCat("rank ", accepted.connector_rank, " is already connected"));
    return false;
  }
  h->rank = accepted.connector_rank;
  h->confirming = true;
  confirming_.insert(h->rank);
  h->out = std::move(accepted.confirm);
  h->sent = 0;
  return Advance(h, 0);
}

void TcpMeshListener::Refuse(Handshake* h, RejectReason reason, std::string detail) {
  if (h->confirming) confirming_.erase(h->rank);
  h->fd.reset();
  if (options_.on_rejected) options_.on_rejected(RejectedConnection{h->peer, reason, std::move(detail)});
}

bool TcpMeshListener::Admit(int rank, UniqueFd fd) {
  SetNoDelay(fd.get());
  absl::MutexLock lock(&mu_);
  if (ready_.count(rank) > 0 || taken_.count(rank) > 0) return false;  // fd closes here
  ready_.emplace(rank, std::move(fd));
  return true;
}

bool TcpMeshListener::RankClaimed(int rank) {
  if (confirming_.count(rank) > 0) return true;
  absl::MutexLock lock(&mu_);
  return ready_.count(rank) > 0 || taken_.count(rank) > 0;
}

}  // namespace herd
