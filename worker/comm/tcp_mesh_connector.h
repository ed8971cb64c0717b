// The connecting side of the member handshake (tcp_mesh_handshake.h): dials a
// peer rank's TcpMeshListener, retrying until a deadline while it is not up
// yet, and returns the socket once both sides have proved the generation's
// member key.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/tcp_mesh_handshake.h"
#include "worker/comm/unique_fd.h"

namespace herd {

struct TcpMeshConnectOptions {
  HandshakeParams params;
  int rank = 0;       // ours, as the response claims it
  int peer_rank = 0;  // the listener's; its challenge must say so
  std::string host;
  int port = 0;
  // Bounds everything: connect retries and the handshake.
  std::chrono::milliseconds timeout{30000};
  // Asked between retries, at most every `still_wanted_interval`: a non-OK
  // status ends the retries with it. A peer that died before it listened
  // never will, and its generation's end is the event that says so (the
  // mesh asks the generation's store), not the timeout.
  std::function<absl::Status()> still_wanted;
  std::chrono::milliseconds still_wanted_interval{250};
};

// The authenticated socket (blocking mode, TCP_NODELAY): the next byte on it
// is the listener's first data-plane byte. Errors:
//  - DEADLINE_EXCEEDED: no listener answered, or the handshake did not
//    finish, before the timeout (the message says which and the last error);
//  - UNAUTHENTICATED: the other end is not a member of this generation, or
//    refused us (closed after our proof); the message names the reason
//    (RejectReasonName) for the audit line;
//  - INVALID_ARGUMENT: bad options.
//  - still_wanted's status, once it is not OK.
// Refused or reset connections, and a listener closing before its challenge
// (too busy), are retried with a short backoff until the timeout.
absl::StatusOr<UniqueFd> ConnectToTcpMeshPeer(const TcpMeshConnectOptions& options);

}  // namespace herd
