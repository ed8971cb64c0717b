// One rank's data-plane listener: accepts TCP connections, runs the member
// handshake (tcp_mesh_handshake.h) on each with a deadline, and hands the
// sockets that proved the generation's key to the caller, keyed by the
// peer's rank. Anything else (an idle connection, junk, a replayed or
// wrong-key handshake) is closed and reported through `on_rejected`, without
// disturbing the listener or the peers already authenticated.
//
// One thread multiplexes every handshake in progress with poll(), so a flood
// of connections costs a bounded amount of memory (max_handshakes) and no
// thread per connection.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/tcp_mesh_handshake.h"
#include "worker/comm/unique_fd.h"

namespace herd {

// A connection the listener closed without admitting it.
struct RejectedConnection {
  std::string peer;  // "1.2.3.4:567"
  RejectReason reason = RejectReason::kNone;
  std::string detail;
};

// "audit: data-plane connection from P refused (reason): detail", the line
// to log for a rejection.
std::string AuditLine(const RejectedConnection& rejected);

struct TcpMeshListenerOptions {
  HandshakeParams params;
  int rank = 0;               // this rank: what the challenge says we are
  std::string host;           // interface to listen on; "" for all
  int port = 0;               // 0 picks a free port (see port())
  // From accept to the connector's proof; a connection that has not proved
  // the key by then is closed (kTimeout).
  std::chrono::milliseconds handshake_timeout{5000};
  // Handshakes in progress at once; a connection beyond that is closed at
  // once (kOverloaded). A real peer's connector retries such a close.
  size_t max_handshakes = 256;
  // Called on the listener's thread for every connection it refuses; keep
  // it short (count, log). May be empty.
  std::function<void(const RejectedConnection&)> on_rejected;
};

class TcpMeshListener {
 public:
  // Binds, listens and starts the listener's thread.
  static absl::StatusOr<std::unique_ptr<TcpMeshListener>> Start(TcpMeshListenerOptions options);
  // Stops the thread and closes every socket not yet taken.
  ~TcpMeshListener();

  int port() const { return port_; }

  // Waits up to `timeout` for `peer_rank` to prove the key, then hands over
  // its socket (blocking mode, TCP_NODELAY): the next byte on it is the
  // peer's first data-plane byte. DEADLINE_EXCEEDED if it has not by then;
  // FAILED_PRECONDITION if it was already taken; INVALID_ARGUMENT for a rank
  // outside the world or our own.
  absl::StatusOr<UniqueFd> TakePeer(int peer_rank, std::chrono::milliseconds timeout);

 private:
  struct Handshake;

  TcpMeshListener(TcpMeshListenerOptions options, UniqueFd listen_fd, UniqueFd wake_read, UniqueFd wake_write);
  void Loop();
  // Accepts every pending connection; false after an accept error that
  // will not clear by itself (out of file descriptors).
  bool AcceptAll(std::vector<std::unique_ptr<Handshake>>* handshakes);
  // Advances one handshake on poll's events; false when it is finished
  // (admitted or refused) and can be dropped.
  bool Advance(Handshake* handshake, short revents);
  void Refuse(Handshake* handshake, RejectReason reason, std::string detail);
  // Registers an authenticated rank; false if that rank already has one.
  bool Admit(int rank, UniqueFd fd);
  // Whether `rank` is being confirmed, waits to be taken, or was taken.
  bool RankClaimed(int rank);

  const TcpMeshListenerOptions options_;
  const UniqueFd listen_fd_;
  const UniqueFd wake_read_, wake_write_;
  const int port_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int, UniqueFd> ready_ ABSL_GUARDED_BY(mu_);
  std::set<int> taken_ ABSL_GUARDED_BY(mu_);
  // Ranks whose confirm is being sent (the listener's thread only): a second
  // connection for one of them is refused before it is confirmed.
  std::set<int> confirming_;

  std::thread thread_;
};

}  // namespace herd
