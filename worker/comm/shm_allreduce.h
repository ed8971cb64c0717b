// All-reduce through shared memory for ranks on one host, in front of
// another Communicator (herd's TCP mesh or Gloo) that keeps every other
// collective.
//
// Over loopback TCP a rank's data crosses the kernel twice per ring step.
// Here every rank's data sits in its slot of one shared segment; each rank
// sums its 1/N share of all slots (in rank order, so every rank gets the
// same bits) and writes that share back into every slot. Buffers from
// AllocateAllReduceBuffer already live in the slot (the trainer's gradient
// buckets do): reading every share once and writing it once is all the
// memory traffic. Other buffers are copied into a scratch area of the slot
// and back. A reduce-scatter meets the same way; each rank sums only its
// own block, in the same rank order. float32 sums up to `slot_bytes` take
// this path; other types and larger buffers go to `inner`. Every rank makes the same choice, so the
// collective sequences stay matched.
//
// Failure: waits are bounded by `timeout` (DEADLINE_EXCEEDED); a peer process
// that exited is noticed within milliseconds (UNAVAILABLE), and a peer that
// abandons the segment (its communicator was destroyed, e.g. after a failure
// elsewhere) fails the op with UNAVAILABLE too. The first failure breaks the
// communicator, as for every backend (ABORTED afterwards).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd {

struct ShmAllReduceOptions {
  int rank = 0;
  int size = 1;
  size_t slot_bytes = 0;  // largest all-reduce taking the shared-memory path
  // Room for AllocateAllReduceBuffer (in-place buffers), on top of slot_bytes.
  size_t in_place_bytes = 0;
  std::chrono::milliseconds timeout{30000};
  std::string key_prefix;  // store namespace (one per generation)
};

// Rank 0 creates the segment (POSIX shm, space reserved up front so a full
// /dev/shm fails here, not later with SIGBUS) and publishes its name through
// `store`; the others map it. RESOURCE_EXHAUSTED when the segment cannot be
// created or mapped on any rank (every rank then gets it, and callers fall
// back to `inner` alone); the store's and `inner`'s errors pass through. `inner` must
// outlive the result and have the same rank and size.
absl::StatusOr<std::unique_ptr<Communicator>> CreateShmAllReduce(const ShmAllReduceOptions& options,
                                                                 Communicator* inner,
                                                                 std::shared_ptr<RendezvousStore> store);

}  // namespace herd
