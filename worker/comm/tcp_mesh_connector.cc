#include "worker/comm/tcp_mesh_connector.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "worker/comm/peer_fault.h"
#include "worker/comm/tcp_socket.h"
#include "worker/comm/setup_wait.h"

namespace herd {
namespace {

// One connection attempt: a socket, a final error, or "try again" (with
// why in `last_error`).
struct Attempt {
  std::optional<absl::StatusOr<UniqueFd>> result;  // empty: retry
};

// A TCP connection to host:port before `deadline`, or empty with the reason.
std::optional<UniqueFd> Dial(const TcpMeshConnectOptions& o, SteadyTime deadline, std::string* last_error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(o.port);
  if (int rc = getaddrinfo(o.host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    *last_error = absl::StrCat("resolve: ", gai_strerror(rc));
    return std::nullopt;
  }
  std::optional<UniqueFd> connected;
  for (addrinfo* a = found; a != nullptr && !connected; a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      *last_error = absl::StrCat("socket: ", std::strerror(errno));
      continue;
    }
    if (connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        *last_error = absl::StrCat("connect: ", std::strerror(errno));
        continue;
      }
      pollfd p{fd.get(), POLLOUT, 0};
      int ready;
      do {
        ready = poll(&p, 1, PollMillisUntil(deadline));
      } while (ready < 0 && errno == EINTR);
      if (ready <= 0) {
        *last_error = "connect: no answer";
        continue;
      }
      int error = 0;
      socklen_t length = sizeof(error);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
      if (error != 0) {
        *last_error = absl::StrCat("connect: ", std::strerror(error));
        continue;
      }
    }
    connected = std::move(fd);
  }
  freeaddrinfo(found);
  return connected;
}

absl::Status Refused(const std::string& where, RejectReason reason, const std::string& detail) {
  return absl::UnauthenticatedError(
      absl::StrCat("member handshake with ", where, ": ", RejectReasonName(reason), ": ", detail));
}

Attempt TryOnce(const TcpMeshConnectOptions& o, const std::string& where, SteadyTime deadline,
                std::string* last_error) {
  std::optional<UniqueFd> fd = Dial(o, deadline, last_error);
  if (!fd) return {};
  const int socket_fd = fd->get();

  std::string challenge;
  int error = 0;
  switch (ReadExactly(socket_fd, kChallengeBytes, deadline, &challenge, &error)) {
    case ReadEnd::kComplete:
      break;
    case ReadEnd::kTimeout:
      *last_error = absl::StrCat("no challenge after ", challenge.size(), " bytes");
      return {};
    case ReadEnd::kClosed:
    case ReadEnd::kError:
      if (challenge.empty()) {  // refused before it began (too busy, going down): retry
        *last_error = error != 0 ? absl::StrCat("recv: ", std::strerror(error)) : "closed before its challenge";
        return {};
      }
      return {Refused(where, RejectReason::kTruncated,
                      absl::StrCat("challenge cut after ", challenge.size(), " of ", kChallengeBytes, " bytes"))};
  }
  absl::StatusOr<HandshakeNonce> nonce = NewHandshakeNonce();
  if (!nonce.ok()) return {nonce.status()};
  AnsweredChallenge answered;
  if (HandshakeVerdict verdict = AnswerChallenge(o.params, o.rank, o.peer_rank, *nonce, challenge, &answered);
      !verdict.ok()) {
    return {Refused(where, verdict.reason, verdict.detail)};
  }
  if (absl::Status sent = WriteAll(socket_fd, answered.response, deadline); !sent.ok()) {
    *last_error = std::string(sent.message());
    return {};
  }
  std::string confirm;
  switch (ReadExactly(socket_fd, kConfirmBytes, deadline, &confirm, &error)) {
    case ReadEnd::kComplete:
      break;
    case ReadEnd::kTimeout:
      *last_error = absl::StrCat("no confirm after ", confirm.size(), " bytes");
      return {};
    case ReadEnd::kClosed:
    case ReadEnd::kError:
      // The listener does not say why (it tells strangers nothing); its
      // own audit line has the reason.
      return {absl::UnauthenticatedError(absl::StrCat(
          "member handshake with ", where, ": refused: the listener closed the connection after our proof (",
          error != 0 ? std::strerror(error) : "closed", "): it does not accept our key, generation or rank"))};
  }
  if (HandshakeVerdict verdict = CheckConfirm(o.params, o.rank, o.peer_rank, answered.listener_nonce, *nonce, confirm);
      !verdict.ok()) {
    return {Refused(where, verdict.reason, verdict.detail)};
  }
  if (absl::Status status = SetNonBlocking(socket_fd, false); !status.ok()) return {status};
  SetNoDelay(socket_fd);
  return {std::move(*fd)};
}

}  // namespace

absl::StatusOr<UniqueFd> ConnectToTcpMeshPeer(const TcpMeshConnectOptions& o) {
  const int world = o.params.world_size;
  if (o.rank < 0 || o.rank >= world || o.peer_rank < 0 || o.peer_rank >= world || o.rank == o.peer_rank) {
    return absl::InvalidArgumentError(absl::StrCat("ConnectToTcpMeshPeer: rank ", o.rank, " and peer_rank ", o.peer_rank,
                                                   " must be distinct ranks of a world of ", world));
  }
  if (o.port < 1 || o.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("ConnectToTcpMeshPeer: port ", o.port, " outside 1-65535"));
  }
  const std::string where = absl::StrCat("rank ", o.peer_rank, " at ", o.host, ":", o.port);
  const SteadyTime deadline = std::chrono::steady_clock::now() + o.timeout;
  std::string last_error = "not tried";
  std::optional<absl::StatusOr<UniqueFd>> result;
  SetupWaitOptions wait;
  wait.timeout = o.timeout;
  // Retry backoff while the listener is not up yet (not a wait for an event).
  wait.poll_interval = std::chrono::milliseconds(5);
  wait.max_poll_interval = std::chrono::milliseconds(200);
  wait.still_wanted_interval = o.still_wanted_interval;
  const absl::Status waited = WaitForSetup(wait, SystemSetupWaitHooks(
                                                     [&]() -> absl::StatusOr<bool> {
                                                       result = TryOnce(o, where, deadline, &last_error).result;
                                                       return result.has_value();
                                                     },
                                                     o.still_wanted));
  if (result) return std::move(*result);
  if (waited.code() == absl::StatusCode::kDeadlineExceeded) {
    // It never answered: blamed late, like a collective's silent peer.
    return PeerLateError(o.peer_rank, absl::StrCat("no member handshake with ", where, " within ",
                                                   o.timeout.count(), " ms; last: ", last_error));
  }
  return absl::Status(waited.code(), absl::StrCat("no member handshake with ", where, ": ", waited.message(),
                                                  " (last: ", last_error, ")"));
}

}  // namespace herd
