#include "worker/train/group_communicators.h"

#include <glog/logging.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "worker/comm/gloo_communicator.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/shm_allreduce.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/peer_fault.h"
#include "worker/comm/subgroup_communicator.h"
#include "worker/comm/tcp_mesh_communicator.h"

namespace herd {
namespace {

// CPU ranks that all share one host address sum gradients in shared memory.
bool UseSharedMemory(const v1::JoinGenerationResponse& join, const TrainingContext& context) {
  if (context.device().is_cuda() || context.sync().same_host != SameHostTransport::kSharedMemory || join.world_size() < 2) {
    return false;
  }
  for (const auto& peer : join.peers()) {
    if (peer.address() != join.peers(0).address()) return false;
  }
  return true;
}

// How long one connection may take to prove membership; a member answers
// in well under a millisecond, an outsider holds a handshake slot this long.
constexpr std::chrono::milliseconds kHandshakeTimeout{5000};

absl::StatusOr<std::unique_ptr<Communicator>> CreateControl(const v1::JoinGenerationResponse& join,
                                                            std::chrono::milliseconds timeout, CoordinatorLink* link,
                                                            const DataPlaneOptions& plane, const std::string& prefix) {
  const int rank = static_cast<int>(join.rank());
  const std::string& host = join.peers(join.rank()).address();
  if (plane.plane == DataPlane::kGloo) {
    GlooOptions gloo;
    gloo.rank = rank;
    gloo.size = static_cast<int>(join.world_size());
    gloo.host = host;
    gloo.timeout = timeout;
    gloo.key_prefix = prefix + "gloo/";
    return CreateGlooCommunicator(gloo, link->KvStore(join.generation()));
  }
  TcpMeshOptions tcp;
  tcp.mesh.key_prefix = prefix + "mesh/";
  tcp.mesh.generation = join.generation();
  tcp.mesh.rank = rank;
  tcp.mesh.world_size = static_cast<int>(join.world_size());
  tcp.mesh.listen_host = host;
  tcp.mesh.advertise_host = host;
  tcp.mesh.timeout = timeout;
  tcp.mesh.handshake_timeout = std::min(kHandshakeTimeout, timeout);
  const int64_t generation = join.generation();
  tcp.mesh.on_rejected = [on_rejected = plane.on_rejected, generation, rank](const RejectedConnection& rejected) {
    if (on_rejected) {
      on_rejected(rejected, generation, rank);
    } else {
      LOG(WARNING) << AuditLine(rejected) << "; generation " << generation << ", rank " << rank;
    }
  };
  tcp.timeout = timeout;
  tcp.congestion_control = plane.congestion_control == "default" ? "" : plane.congestion_control;
  tcp.lanes = plane.lanes;
  // The store is the generation's: its keys (the member key among them)
  // go when the generation ends.
  std::shared_ptr<RendezvousStore> store = link->KvStore(join.generation());
  TcpMeshSetup setup;
  auto comm = CreateTcpMeshCommunicator(*store, tcp, &setup);
  if (comm.ok() && join.world_size() > 1) {
    LOG(INFO) << "data plane: TCP congestion control " << setup.congestion_control
              << (setup.note.empty() ? "" : absl::StrCat(" (", setup.note, ")"));
  }
  return comm;
}

// The communicators of the ranks in `join` (the generation's, or a
// subgroup's); `prefix` prefixes their store keys, so subgroups bootstrap
// apart in the generation's store, each TCP mesh with its own member key.
absl::StatusOr<GroupCommunicators> CreateGroup(const v1::JoinGenerationResponse& join, const TrainingContext& context,
                                               CoordinatorLink* link, const DataPlaneOptions& plane,
                                               const std::string& prefix) {
  GroupCommunicators group;
  const std::chrono::milliseconds timeout = context.CollectiveTimeout();
  auto comm = CreateControl(join, timeout, link, plane, prefix);
  if (!comm.ok()) return comm.status();
  group.control = std::move(*comm);
  group.data = group.control.get();
  if (UseSharedMemory(join, context)) {
    // Slots as large as all parameters hold any bucket; past 64 MiB larger
    // buckets go through the CPU data plane (TCP mesh or Gloo) rather than fill /dev/shm. The in-place area
    // holds the gradient buckets themselves (plus each one's alignment); the
    // scratch area serves other float32 sums (parameter averaging, metrics).
    size_t bytes = 0;
    for (const auto& p : context.params()) bytes += p.nbytes();
    ShmAllReduceOptions shm;
    shm.rank = static_cast<int>(join.rank());
    shm.size = static_cast<int>(join.world_size());
    shm.slot_bytes = std::min<size_t>(bytes, size_t{64} << 20);
    shm.in_place_bytes = shm.slot_bytes + 64 * context.params().size();
    shm.timeout = timeout;
    shm.key_prefix = prefix + "shm/";
    auto created = CreateShmAllReduce(shm, group.control.get(), link->KvStore(join.generation()));
    if (created.ok()) {
      group.shm = std::move(*created);
      group.data = group.shm.get();
    } else if (created.status().code() != absl::StatusCode::kResourceExhausted) {
      return created.status();
    } else {
      LOG(WARNING) << "shared-memory all-reduce unavailable, using " << group.control->backend()
                   << " over TCP: " << created.status();
    }
  }
  if (context.device().is_cuda()) {
    NcclOptions nccl;
    nccl.rank = static_cast<int>(join.rank());
    nccl.size = static_cast<int>(join.world_size());
    nccl.device = context.device().index();
    nccl.timeout = timeout;
    nccl.key_prefix = prefix + "nccl/";
    nccl.compute_stream = nullptr;  // LibTorch computes on the legacy default stream
    auto created = CreateNcclCommunicator(nccl, link->KvStore(join.generation()));
    if (!created.ok()) return created.status();
    group.nccl = std::move(*created);
    group.data = group.nccl.get();
  }
  return group;
}

// "island/K/" and "cross/P/": distinct per subgroup, so no two subgroups
// (nor the generation's own group) share a store key or a member key.
// `together`: the island's and the cross group's communicators form at the
// same time, as they can (see CreateGroupCommunicatorsOn).
absl::Status AddIslandGroups(const v1::JoinGenerationResponse& join, const TrainingContext& context,
                             CoordinatorLink* link, const DataPlaneOptions& plane, bool together,
                             GroupCommunicators* group) {
  auto layout = LayoutIslands(join.peers(), join.spec().sync().islands_by(), static_cast<int>(join.rank()));
  if (!layout.ok()) return layout.status();
  // A failure in a subgroup blames its peer by generation rank, so the
  // report leaves out the member that failed.
  const auto seen_whole = [](GroupCommunicators* sub, const std::vector<int>& ranks) {
    sub->subgroup_data = std::make_unique<SubgroupCommunicator>(sub->data, ranks);
    sub->data = sub->subgroup_data.get();
  };
  const auto create_cross = [&] {
    return CreateGroup(SubgroupJoin(join, layout->cross), context, link, plane,
                       absl::StrCat("cross/", layout->position, "/"));
  };
  std::optional<absl::StatusOr<GroupCommunicators>> cross;
  std::thread cross_beside;
  if (together && layout->owns_shard()) cross_beside = std::thread([&] { cross = create_cross(); });
  auto island = CreateGroup(SubgroupJoin(join, layout->my_island()), context, link, plane,
                            absl::StrCat("island/", layout->island, "/"));
  if (cross_beside.joinable()) cross_beside.join();
  if (!island.ok()) {
    return WithContext(InGroupRanks(island.status(), layout->my_island()),
                       absl::StrCat("island ", layout->values[layout->island], ": "));
  }
  group->island = std::make_unique<GroupCommunicators>(*std::move(island));
  seen_whole(group->island.get(), layout->my_island());
  if (layout->owns_shard()) {
    if (!cross.has_value()) cross = create_cross();
    if (!cross->ok()) {
      return WithContext(InGroupRanks(cross->status(), layout->cross),
                         absl::StrCat("cross group ", layout->position, ": "));
    }
    group->cross = std::make_unique<GroupCommunicators>(*std::move(*cross));
    seen_whole(group->cross.get(), layout->cross);
  }
  group->islands = *std::move(layout);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GroupCommunicators> CreateGroupCommunicators(const v1::JoinGenerationResponse& join,
                                                            const TrainingContext& context, CoordinatorLink* link) {
  return CreateGroupCommunicatorsOn(join, context, link, DataPlaneOptions{});
}

CommunicatorFactory GroupCommunicatorsOn(DataPlaneOptions plane) {
  return [plane = std::move(plane)](const v1::JoinGenerationResponse& join, const TrainingContext& context,
                                    CoordinatorLink* link) {
    return CreateGroupCommunicatorsOn(join, context, link, plane);
  };
}


v1::JoinGenerationResponse SubgroupJoin(const v1::JoinGenerationResponse& join, const std::vector<int>& ranks) {
  v1::JoinGenerationResponse sub = join;
  sub.clear_peers();
  for (size_t i = 0; i < ranks.size(); ++i) {
    v1::Peer* peer = sub.add_peers();
    *peer = join.peers(ranks[i]);
    peer->set_rank(static_cast<int64_t>(i));
    if (ranks[i] == join.rank()) sub.set_rank(static_cast<int64_t>(i));
  }
  sub.set_world_size(static_cast<int64_t>(ranks.size()));
  return sub;
}

absl::StatusOr<GroupCommunicators> CreateGroupCommunicatorsOn(const v1::JoinGenerationResponse& join,
                                                              const TrainingContext& context, CoordinatorLink* link,
                                                              const DataPlaneOptions& plane) {
  if (join.spec().sync().islands_by().empty()) return CreateGroup(join, context, link, plane, "");
  // The generation's, the island's and the cross group's communicators
  // form at the same time: each has its own store keys, member key and
  // peers, and one after another a rank began its next only once the peers
  // of its last were done, so every re-form (after a failure too) cost the
  // three in sequence. Failures are returned in the same order as before.
  // NCCL's are set up one at a time (CUDA).
  const bool together = !context.device().is_cuda();
  GroupCommunicators subgroups;
  absl::Status added;
  std::thread beside;
  if (together) beside = std::thread([&] { added = AddIslandGroups(join, context, link, plane, true, &subgroups); });
  auto group = CreateGroup(join, context, link, plane, "");
  if (beside.joinable()) beside.join();
  if (!group.ok()) return group;
  if (!together) added = AddIslandGroups(join, context, link, plane, false, &subgroups);
  if (!added.ok()) return added;
  group->islands = std::move(subgroups.islands);
  group->island = std::move(subgroups.island);
  group->cross = std::move(subgroups.cross);
  return group;
}

}  // namespace herd
