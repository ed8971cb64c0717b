// A CPU Communicator over Gloo's TCP transport (--data-plane=gloo; the TCP
// mesh, tcp_mesh_communicator.h, is the default).
//
// Collectives run in issue order on the communicator's own thread(s), each
// bounded by `timeout`. The first failure breaks the communicator: later ops
// fail fast with ABORTED (see collective_queue.h). Destruction waits at most
// for the op in flight, which its timeout bounds.
//
// Buffers passed to *Async must stay valid until their Work completes.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  std::string host = "127.0.0.1";  // interface address to bind and advertise to peers
  std::chrono::milliseconds timeout{30000};  // rendezvous, connect and every collective
  std::string key_prefix;  // prepended to every store key (one namespace per generation)
  int threads = 1;         // collective worker threads; >1 lets independent ops overlap
};

// Rendezvous through `store` and connect to every peer. Fails with
// DEADLINE_EXCEEDED when a peer does not show up within the timeout,
// UNAVAILABLE when the transport cannot be set up, INVALID_ARGUMENT for bad
// options.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options,
                                                                     std::shared_ptr<RendezvousStore> store);

}  // namespace herd
