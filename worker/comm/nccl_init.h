// Bringing up one NCCL communicator: the unique-id exchange through the
// rendezvous store, then the non-blocking ncclCommInitRankConfig, each
// bounded by the timeout. Internal to //worker/comm:nccl_communicator.
#pragma once

#include <nccl.h>

#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/nccl_communicator.h"

namespace herd {
namespace nccl_internal {

// Rank 0 creates the id and publishes it; the others wait for it. `name`
// ("rank 1 of 2, CUDA device 0") goes into errors.
absl::StatusOr<ncclUniqueId> ExchangeUniqueId(const NcclOptions& options, RendezvousStore& store,
                                              const std::string& name);

// Sets up the communicator on the current CUDA device. DEADLINE_EXCEEDED
// (after aborting the half-built communicator) when the peers do not all
// join within the timeout.
absl::StatusOr<ncclComm_t> InitNcclComm(const NcclOptions& options, const ncclUniqueId& id, const std::string& name);

}  // namespace nccl_internal
}  // namespace herd
