// A delaying relay between two links, since this kernel has no netem.
//
// It reads every frame arriving on one interface (an AF_PACKET socket; frames
// it sent itself are ignored), holds it for a fixed delay and writes it out of
// the other interface, in both directions, first in first out. Frames carry a
// virtio-net header (PACKET_VNET_HDR), so TCP's segmentation-offloaded frames
// (up to 64 KiB) and their pending checksums pass through unchanged: no
// offloads need to be turned off. A direction holds at most kMaxQueuedBytes;
// a frame beyond that is dropped and counted.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace herd::testbed {

struct RelayOptions {
  std::string host_side;    // interface towards the host
  std::string bridge_side;  // interface towards the bridge
  int64_t delay_us = 0;     // held this long in each direction (0..10 s)
  std::string stats_path;   // rewritten (JSON) once a second when it changed; "" none
};

struct RelayDirectionStats {
  uint64_t frames = 0;          // written out
  uint64_t bytes = 0;           // written out (frame bytes, without the header)
  uint64_t dropped_full = 0;    // the relay's queue was full
  uint64_t dropped_write = 0;   // the outgoing link refused it (e.g. its tbf queue was full)
  uint64_t dropped_kernel = 0;  // the socket's receive buffer overflowed (PACKET_STATISTICS)
};

inline constexpr uint64_t kMaxQueuedBytes = uint64_t{64} << 20;

// Runs until SIGTERM or SIGINT (then returns OK) or an error.
absl::Status RunRelay(const RelayOptions& options);

}  // namespace herd::testbed
