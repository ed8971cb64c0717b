// A full mesh of member-authenticated TCP connections for one generation:
// the connection layer under the TCP mesh communicator
// (tcp_mesh_communicator.h). Each rank
// gets the generation's member key (tcp_mesh_key_exchange.h), listens and
// publishes its address in the rendezvous store, connects to every lower
// rank and accepts every higher one; each connection is admitted only after
// the member handshake (tcp_mesh_handshake.h).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/tcp_mesh_listener.h"
#include "worker/comm/unique_fd.h"

namespace herd {

struct TcpMeshFormationOptions {
  std::string key_prefix;  // the generation's kv_prefix
  int64_t generation = 0;
  int rank = 0;
  int world_size = 1;
  std::string listen_host;  // interface to listen on; "" for all
  std::string advertise_host = "127.0.0.1";  // the host other ranks dial
  // Bounds the whole formation: key, addresses, connects and accepts.
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds handshake_timeout{5000};
  // Every connection the listener refused (see TcpMeshListenerOptions).
  std::function<void(const RejectedConnection&)> on_rejected;
};

// The store key where `rank` publishes its "host:port".
std::string TcpMeshAddressStoreKey(const std::string& key_prefix, int rank);

// Splits "host:port" or "[v6]:port"; INVALID_ARGUMENT naming the value.
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port);

// peers[r] is the authenticated socket to rank r (blocking mode); peers[rank]
// is empty. The listener closes when this returns: no port stays open.
// DEADLINE_EXCEEDED naming the rank that did not arrive in time;
// UNAUTHENTICATED if a published peer failed the handshake.
absl::StatusOr<std::vector<UniqueFd>> FormTcpMesh(RendezvousStore& store, const TcpMeshFormationOptions& options);

}  // namespace herd
