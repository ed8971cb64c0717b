#include "worker/comm/nccl_init.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/comm/nccl_status.h"

namespace herd {
namespace nccl_internal {

absl::StatusOr<ncclUniqueId> ExchangeUniqueId(const NcclOptions& options, RendezvousStore& store,
                                              const std::string& name) {
  const std::string key = NcclUniqueIdKey(options.key_prefix);
  ncclUniqueId id;
  if (options.rank == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) return NcclStatus(result, absl::StrCat("nccl (", name, "): ncclGetUniqueId"), nullptr);
    const absl::Status published = store.Set(key, std::string(id.internal, sizeof(id.internal)));
    if (!published.ok()) {
      return absl::Status(published.code(), absl::StrCat("nccl (", name, "): publishing the unique id under '", key,
                                                         "': ", published.message()));
    }
    return id;
  }
  std::string value;
  const absl::Status fetched = store.Get(key, options.timeout, &value);
  if (!fetched.ok()) {
    return absl::Status(fetched.code(), absl::StrCat("nccl (", name, "): waiting for rank 0's unique id under '", key,
                                                     "': ", fetched.message()));
  }
  if (value.size() != sizeof(id.internal)) {
    return absl::InternalError(absl::StrCat("nccl (", name, "): the value under '", key, "' has ", value.size(),
                                            " bytes, not the ", sizeof(id.internal), " of an NCCL unique id"));
  }
  std::memcpy(id.internal, value.data(), sizeof(id.internal));
  return id;
}

absl::StatusOr<ncclComm_t> InitNcclComm(const NcclOptions& options, const ncclUniqueId& id, const std::string& name) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking, so neither setup nor any later call can block past herd's
  // timeout. (NCCL_COMM_BLOCKING=1 in the environment overrides this.)
  config.blocking = 0;
  const std::string what = absl::StrCat("nccl (", name, "): communicator setup");
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;

  ncclComm_t comm = nullptr;
  ncclUniqueId id_copy = id;  // NCCL takes it by value
  ncclResult_t state = ncclCommInitRankConfig(&comm, options.size, id_copy, options.rank, &config);
  while (state == ncclInProgress && comm != nullptr) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ncclCommAbort(comm);
      return absl::DeadlineExceededError(absl::StrCat(what, " did not finish within ", options.timeout.count(),
                                                      " ms: a peer did not join, or NCCL cannot reach it"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclResult_t async = ncclSuccess;
    state = ncclCommGetAsyncError(comm, &async);
    if (state == ncclSuccess) state = async;
  }
  if (state != ncclSuccess) {
    absl::Status status = state == ncclInProgress
                              ? absl::InternalError(absl::StrCat(what, ": NCCL returned no communicator"))
                              : NcclStatus(state, what, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    return status;
  }
  return comm;
}

}  // namespace nccl_internal
}  // namespace herd
