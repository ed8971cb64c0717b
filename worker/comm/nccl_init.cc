#include "worker/comm/nccl_init.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/comm/nccl_status.h"
#include "worker/comm/setup_wait.h"

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

absl::StatusOr<ncclComm_t> InitNcclComm(const NcclOptions& options, const ncclUniqueId& id, const std::string& name,
                                        std::function<absl::Status()> still_wanted) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking, so neither setup nor any later call can block past herd's
  // timeout or outlive the generation. (NCCL_COMM_BLOCKING=1 in the
  // environment overrides this.)
  config.blocking = 0;
  const std::string what = absl::StrCat("nccl (", name, "): communicator setup");

  ncclComm_t comm = nullptr;
  ncclUniqueId id_copy = id;  // NCCL takes it by value
  ncclResult_t state = ncclCommInitRankConfig(&comm, options.size, id_copy, options.rank, &config);
  if (state == ncclInProgress && comm != nullptr) {
    SetupWaitOptions wait;
    wait.timeout = options.timeout;
    const absl::Status waited = WaitForSetup(
        wait, SystemSetupWaitHooks(
                  [&]() -> absl::StatusOr<bool> {
                    ncclResult_t async = ncclSuccess;
                    state = ncclCommGetAsyncError(comm, &async);
                    if (state == ncclSuccess) state = async;
                    return state != ncclInProgress;
                  },
                  std::move(still_wanted)));
    if (!waited.ok()) {
      ncclCommAbort(comm);
      if (waited.code() == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, " ", waited.message(), ": a peer did not join, or NCCL cannot reach it"));
      }
      return absl::Status(waited.code(), absl::StrCat(what, " stopped: ", waited.message()));
    }
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
