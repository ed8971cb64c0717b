// The GPU Communicator, over NCCL. Buffers are device pointers on
// `options.device`.
//
// Ordering: collectives run on a CUDA stream the communicator owns. Each op
// first waits (on the GPU) for the work already queued on `compute_stream`,
// so gradients written there are complete; Work::Wait() makes
// `compute_stream` wait for the op and also blocks the calling thread until
// it finishes, bounded by `timeout`.
//
// Failure: an op that does not finish within `timeout` of being issued, or an
// error NCCL reports, aborts the NCCL communicator (a watchdog thread checks
// even when nobody waits). Its Work and every op still pending return that
// error (DEADLINE_EXCEEDED, or UNAVAILABLE / INTERNAL from NCCL); every later
// op fails at once with ABORTED. Only a new rendezvous recovers.
//
// An *Async call returns once NCCL has queued the op. That is immediate,
// except that NCCL may still be connecting to peers during the first ops of
// a new communicator (bounded by `timeout` too).
//
// Destruction waits for ops in flight (each bounded by its timeout), then
// releases NCCL cleanly, or aborts it when that does not finish in time.
//
// Where herd was built without NCCL (see third_party/cuda.bzl), this API still
// exists and CreateNcclCommunicator returns UNIMPLEMENTED saying why.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;                            // CUDA device index; one rank per device
  std::chrono::milliseconds timeout{30000};  // rendezvous, NCCL setup, and every collective
  std::string key_prefix;                    // prepended to store keys (one namespace per generation)
  void* compute_stream = nullptr;            // cudaStream_t the trainer computes on; nullptr = legacy default stream
};

// Checks the device, exchanges the NCCL unique id through `store` (rank 0
// publishes key_prefix + "nccl-unique-id"; the others wait for it up to the
// timeout) and sets up a non-blocking NCCL communicator, bounded by the
// timeout. Fails with INVALID_ARGUMENT for bad options, FAILED_PRECONDITION
// when the device cannot be used (naming it and the CUDA error),
// DEADLINE_EXCEEDED when a peer does not show up in time, UNAVAILABLE or
// INTERNAL for NCCL errors, UNIMPLEMENTED in a build without NCCL.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions& options,
                                                                     std::shared_ptr<RendezvousStore> store);

// OK when this binary was built with NCCL; otherwise UNIMPLEMENTED naming
// what the build did not find.
absl::Status NcclBuildStatus();

// The NCCL library version loaded at run time (NCCL_VERSION_CODE form, e.g.
// 22809 for 2.28.9).
absl::StatusOr<int> NcclRuntimeVersion();

// The store key rank 0 publishes the unique id under.
inline std::string NcclUniqueIdKey(const std::string& key_prefix) { return key_prefix + "nccl-unique-id"; }

}  // namespace herd
