// Bringing up one NCCL communicator: the unique-id exchange through the
// rendezvous store, then the non-blocking ncclCommInitRankConfig, each
// bounded by the timeout. Internal to //worker/comm:nccl_communicator.
#pragma once

#include <nccl.h>

#include <functional>
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

// Sets up the communicator on the current CUDA device, aborting the
// half-built communicator when the peers do not all join within the timeout
// (DEADLINE_EXCEEDED) or when `still_wanted`, asked every 250 ms, says the
// generation is over (its status).
absl::StatusOr<ncclComm_t> InitNcclComm(const NcclOptions& options, const ncclUniqueId& id, const std::string& name,
                                        std::function<absl::Status()> still_wanted);

}  // namespace nccl_internal
}  // namespace herd
