// Moves bytes to and from several peers at once over non-blocking sockets:
// every send and every receive progresses together (poll), so ranks that
// all send before they receive cannot deadlock on full socket buffers.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/status.h"

namespace herd {

struct PeerTransfer {
  int rank = -1;  // names the peer in errors
  int fd = -1;    // non-blocking, connected
  const char* send = nullptr;
  size_t send_bytes = 0;
  char* receive = nullptr;
  size_t receive_bytes = 0;
};

// Sends and receives exactly the given bytes on each transfer before
// `deadline`. DEADLINE_EXCEEDED names the first peer still owing bytes;
// UNAVAILABLE a peer that closed its connection or reset it. Bytes a peer
// sends beyond `receive_bytes` stay in its socket for the next call.
absl::Status ExchangeWithPeers(std::vector<PeerTransfer>& transfers,
                               std::chrono::steady_clock::time_point deadline);

// The same, calling `on_received(received)` whenever bytes arrived, with
// the bytes received so far on each transfer: the caller can work on what
// is in (sum it) while the rest is still on its way.
absl::Status ExchangeWithPeers(std::vector<PeerTransfer>& transfers, std::chrono::steady_clock::time_point deadline,
                               const std::function<void(const std::vector<size_t>& received)>& on_received);

}  // namespace herd
