// End-to-end checks of the NCCL communicator on real GPUs, shared by
// nccl_communicator_test and the nccl_smoke binary so both hold the same
// contract. Each returns OK or what went wrong. Ranks are threads of this
// process; rank r uses CUDA device r (NCCL allows one rank per device).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"

namespace herd {

// Why the GPU checks cannot run here ("" when they can): a build without
// NCCL, or no usable CUDA device.
std::string NcclChecksUnavailableReason();

// Collectives on `world` ranks (devices 0..world-1): values must be exact.
absl::Status CheckAllReduce(int world, DataType type);
absl::Status CheckBroadcast(int world);
absl::Status CheckAllGather(int world);
// Block r of the float32 sum lands on rank r, into a separate buffer and in place.
absl::Status CheckReduceScatter(int world);
// ReduceScatterInPlaceAsync: each rank's ranges of its layout hold the sums.
absl::Status CheckReduceScatterInPlace(int world);
absl::Status CheckBarrier(int world);
// Many ops issued before any is waited for, then waited for in issue order.
absl::Status CheckManyOpsInFlight(int world);
// Done() turns true without Wait().
absl::Status CheckDoneBecomesTrue(int world);

// One device.
// An op starts only after the work queued before it on the compute stream.
absl::Status CheckOpWaitsForComputeStream();
// Bad options are INVALID_ARGUMENT; a missing device names itself.
absl::Status CheckBadOptionsRejected();
// A bad argument breaks the communicator: later ops are ABORTED.
absl::Status CheckBadArgumentBreaks();
// Rank 1 of 2 with no rank 0: DEADLINE_EXCEEDED within 2x the timeout.
absl::Status CheckMissingUniqueIdTimesOut();
// Rank 0 of 2 with no rank 1: setup gives up with DEADLINE_EXCEEDED.
absl::Status CheckMissingPeerTimesOutSetup();
// The same, but the generation ends while rank 0 waits: setup stops with the
// store's error within seconds, not at its 20 s timeout.
absl::Status CheckEndedGenerationStopsSetup();
// An op held back past the timeout (a stalled compute stream plays the hung
// peer): Wait() returns DEADLINE_EXCEEDED long before the GPU gets to it,
// pending ops share the error, later ops are ABORTED, destruction is bounded.
absl::Status CheckHungOpTimesOut();
// The same failure found by the watchdog while nobody waits.
absl::Status CheckWatchdogBreaksWithoutWait();

// Needs a build with NCCL and a machine with no usable GPU: creation fails
// with FAILED_PRECONDITION naming the device and CUDA's reason.
absl::Status CheckNoGpuIsReportedClearly();

struct NcclCheck {
  std::string name;
  std::function<absl::Status()> run;
};

// Everything above that needs a GPU, in an order that runs the checks which
// leave a stalled stream behind last.
std::vector<NcclCheck> AllNcclChecks(int world);

}  // namespace herd
