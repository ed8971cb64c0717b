#include "worker/train/group_communicators.h"

#include <glog/logging.h>

#include <algorithm>

#include "worker/comm/gloo_communicator.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/shm_allreduce.h"

namespace herd {
namespace {

// CPU ranks that all share one host address sum gradients in shared memory.
bool UseSharedMemory(const v1::JoinGenerationResponse& join, const TrainingContext& context) {
  if (context.device.is_cuda() || context.sync.same_host != SameHostTransport::kSharedMemory || join.world_size() < 2) {
    return false;
  }
  for (const auto& peer : join.peers()) {
    if (peer.address() != join.peers(0).address()) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<GroupCommunicators> CreateGroupCommunicators(const v1::JoinGenerationResponse& join,
                                                            const TrainingContext& context, CoordinatorLink* link) {
  GroupCommunicators group;
  GlooOptions gloo;
  gloo.rank = static_cast<int>(join.rank());
  gloo.size = static_cast<int>(join.world_size());
  gloo.host = join.peers(join.rank()).address();
  gloo.timeout = context.CollectiveTimeout();
  gloo.key_prefix = "gloo/";
  auto comm = CreateGlooCommunicator(gloo, link->KvStore(join.generation()));
  if (!comm.ok()) return comm.status();
  group.control = std::move(*comm);
  group.data = group.control.get();
  if (UseSharedMemory(join, context)) {
    // Slots as large as all parameters hold any bucket; past 64 MiB larger
    // buckets go through Gloo rather than fill /dev/shm. The in-place area
    // holds the gradient buckets themselves (plus each one's alignment); the
    // scratch area serves other float32 sums (parameter averaging, metrics).
    size_t bytes = 0;
    for (const auto& p : context.params) bytes += p.nbytes();
    ShmAllReduceOptions shm;
    shm.rank = gloo.rank;
    shm.size = gloo.size;
    shm.slot_bytes = std::min<size_t>(bytes, size_t{64} << 20);
    shm.in_place_bytes = shm.slot_bytes + 64 * context.params.size();
    shm.timeout = gloo.timeout;
    shm.key_prefix = "shm/";
    auto created = CreateShmAllReduce(shm, group.control.get(), link->KvStore(join.generation()));
    if (created.ok()) {
      group.shm = std::move(*created);
      group.data = group.shm.get();
    } else if (created.status().code() != absl::StatusCode::kResourceExhausted) {
      return created.status();
    } else {
      LOG(WARNING) << "shared-memory all-reduce unavailable, using Gloo over TCP: " << created.status();
    }
  }
  if (context.device.is_cuda()) {
    NcclOptions nccl;
    nccl.rank = gloo.rank;
    nccl.size = gloo.size;
    nccl.device = context.device.index();
    nccl.timeout = gloo.timeout;
    nccl.key_prefix = "nccl/";
    nccl.compute_stream = nullptr;  // LibTorch computes on the legacy default stream
    auto created = CreateNcclCommunicator(nccl, link->KvStore(join.generation()));
    if (!created.ok()) return created.status();
    group.nccl = std::move(*created);
    group.data = group.nccl.get();
  }
  return group;
}

}  // namespace herd
