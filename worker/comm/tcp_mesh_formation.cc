#include "worker/comm/tcp_mesh_formation.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/tcp_mesh_connector.h"
#include "worker/comm/tcp_mesh_key_exchange.h"

namespace herd {
namespace {

using Clock = std::chrono::steady_clock;

// How often a rank dialing a lower rank, or waiting for higher ranks'
// connections, checks that its generation is still on (GenerationStillOn).
constexpr std::chrono::milliseconds kStoreCheckInterval{250};

// Dialing a lower rank and waiting for a higher one both touch only
// sockets, so a generation that ended meanwhile would go unnoticed until the
// deadline: both ask the store (GenerationStillOn) about this generation's
// member key.

std::chrono::milliseconds Left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

}  // namespace

std::string TcpMeshAddressStoreKey(const std::string& key_prefix, int rank) {
  return absl::StrCat(key_prefix, "member-addr/", rank);
}

absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(address.substr(colon + 1), port) ||
      *port < 1 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("member address '", address, "' is not host:port"));
  }
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<UniqueFd>> FormTcpMesh(RendezvousStore& store, const TcpMeshFormationOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tcp mesh: rank ", options.rank, " outside a world of ", options.world_size));
  }
  const Clock::time_point deadline = Clock::now() + options.timeout;
  std::vector<UniqueFd> peers(options.world_size);
  if (options.world_size == 1) return peers;

  absl::StatusOr<MemberKey> key = ShareMemberKey(store, options.key_prefix, options.rank, options.timeout);
  if (!key.ok()) return key.status();
  HandshakeParams params;
  params.key = *key;
  params.generation = options.generation;
  params.world_size = options.world_size;

  // Higher ranks connect to us; the last rank has none and does not listen.
  std::unique_ptr<TcpMeshListener> listener;
  if (options.rank < options.world_size - 1) {
    TcpMeshListenerOptions listen;
    listen.params = params;
    listen.rank = options.rank;
    listen.host = options.listen_host;
    listen.handshake_timeout = options.handshake_timeout;
    listen.on_rejected = options.on_rejected;
    absl::StatusOr<std::unique_ptr<TcpMeshListener>> started = TcpMeshListener::Start(std::move(listen));
    if (!started.ok()) return started.status();
    listener = std::move(*started);
    const std::string address = absl::StrCat(
        options.advertise_host.find(':') == std::string::npos ? options.advertise_host
                                                              : absl::StrCat("[", options.advertise_host, "]"),
        ":", listener->port());
    if (absl::Status set = store.Set(TcpMeshAddressStoreKey(options.key_prefix, options.rank), address); !set.ok()) {
      return set;
    }
  }

  // Lower ranks: dial them, in order.
  for (int peer = 0; peer < options.rank; ++peer) {
    std::string address;
    const std::string store_key = TcpMeshAddressStoreKey(options.key_prefix, peer);
    if (absl::Status got = store.Get(store_key, Left(deadline), &address); !got.ok()) {
      return absl::Status(got.code(), absl::StrCat("rank ", options.rank, " waiting for rank ", peer,
                                                   "'s address (", store_key, "): ", got.message()));
    }
    TcpMeshConnectOptions connect;
    connect.params = params;
    connect.rank = options.rank;
    connect.peer_rank = peer;
    if (absl::Status split = SplitHostPort(address, &connect.host, &connect.port); !split.ok()) return split;
    connect.timeout = Left(deadline);
    connect.still_wanted = [&]() -> absl::Status {
      absl::Status alive = GenerationStillOn(store, MemberKeyStoreKey(options.key_prefix));
      if (alive.ok()) return alive;
      return absl::Status(alive.code(), absl::StrCat("rank ", options.rank, " stopped dialing: the generation's store says ",
                                                     alive.message()));
    };
    connect.still_wanted_interval = kStoreCheckInterval;
    absl::StatusOr<UniqueFd> fd = ConnectToTcpMeshPeer(connect);
    if (!fd.ok()) return fd.status();
    peers[peer] = std::move(*fd);
  }
  // Higher ranks: wait for their authenticated connections.
  for (int peer = options.rank + 1; peer < options.world_size; ++peer) {
    while (true) {
      const Clock::time_point slice_end = std::min(deadline, Clock::now() + kStoreCheckInterval);
      absl::StatusOr<UniqueFd> fd = listener->TakePeer(peer, Left(slice_end));
      if (fd.ok()) {
        peers[peer] = std::move(*fd);
        break;
      }
      if (fd.status().code() != absl::StatusCode::kDeadlineExceeded || Clock::now() >= deadline) return fd.status();
      if (absl::Status alive = GenerationStillOn(store, MemberKeyStoreKey(options.key_prefix)); !alive.ok()) {
        return absl::Status(alive.code(), absl::StrCat("rank ", options.rank, " waiting for rank ", peer,
                                                       " to connect: the generation's store says ", alive.message()));
      }
    }
  }
  return peers;
}

}  // namespace herd
