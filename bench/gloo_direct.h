// Gloo's own all-reduce algorithms called directly, without herd's
// Communicator: the reference herd's Gloo backend is measured against. The
// context is set up exactly as herd sets up its own (TCP device on loopback,
// connectFullMesh through the same rendezvous store).
#pragma once

#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd::bench {

class DirectGloo {
 public:
  static absl::StatusOr<std::unique_ptr<DirectGloo>> Connect(int rank, int world,
                                                             std::shared_ptr<RendezvousStore> store,
                                                             const std::string& key_prefix,
                                                             std::chrono::milliseconds timeout, int stripes = 1);

  // gloo::allreduce with the ring algorithm: the call herd's backend makes.
  // max_segment_bytes 0 keeps Gloo's default (1 MiB).
  absl::Status Ring(float* data, size_t count, size_t max_segment_bytes = 0);
  // The ring over `stripes` contexts at once (each its own TCP connections
  // and I/O thread), each reducing one contiguous stripe of the buffer: more
  // streams per peer. Needs Connect(..., stripes) with at least that many.
  absl::Status StripedRing(float* data, size_t count, int stripes, size_t max_segment_bytes = 0);
  // The older gloo::AllreduceRingChunked (pinned buffers, two chunks per
  // rank in flight). Built once per buffer and reused, as its users do. It
  // has a context of its own: sharing one with gloo::allreduce slowed that to
  // ~2 MB/s at 4 ranks (40 ms delayed ACKs on a 64 KiB window, seen with ss).
  absl::Status RingChunked(float* data, size_t count);

 private:
  DirectGloo(std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts,
             std::shared_ptr<gloo::rendezvous::Context> chunked_context, std::chrono::milliseconds timeout)
      : contexts_(std::move(contexts)),
        chunked_context_(std::move(chunked_context)),
        timeout_(timeout),
        next_tags_(contexts_.size(), 0) {}

  absl::Status RingOn(size_t context, float* data, size_t count, size_t max_segment_bytes);

  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts_;  // [0]: Ring; all: StripedRing
  std::shared_ptr<gloo::rendezvous::Context> chunked_context_;
  std::chrono::milliseconds timeout_;
  std::vector<uint32_t> next_tags_;
  std::unique_ptr<gloo::AllreduceRingChunked<float>> chunked_;
  float* chunked_data_ = nullptr;
  size_t chunked_count_ = 0;
};

}  // namespace herd::bench
