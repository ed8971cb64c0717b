// A generation's communicators: what a re-form replaces. The trainer asks a
// CommunicatorFactory for them, so tests can hand in their own (a fault
// injected at a chosen collective) while real trainers use
// CreateGroupCommunicators.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"
#include "worker/comm/communicator.h"
#include "worker/comm/tcp_mesh_lanes.h"
#include "worker/comm/tcp_mesh_listener.h"
#include "worker/train/generation/coordinator_link.h"
#include "worker/train/sync/island_layout.h"
#include "worker/train/training_context.h"

namespace herd {

// Which transport carries the CPU collectives (herd-worker --data-plane, an
// operator setting): tcp, herd's own member-authenticated TCP mesh
// (worker/comm/tcp_mesh_communicator.h), or gloo, whose connections cannot
// be authenticated (docs/security.md).
enum class DataPlane { kTcp, kGloo };

struct DataPlaneOptions {
  DataPlane plane = DataPlane::kTcp;
  // tcp: each socket's TCP congestion control; "default": the kernel's.
  std::string congestion_control = "bbr";
  // tcp: connections per pair of ranks, one collective on each at a time
  // (worker/comm/tcp_mesh_communicator.h).
  int lanes = kDefaultTcpMeshLanes;
  // Each connection to this rank's data-plane port that did not prove
  // membership (tcp only): it was closed, the generation goes on. Unset:
  // logged as an audit line.
  std::function<void(const RejectedConnection&, int64_t generation, int rank)> on_rejected;
};

struct GroupCommunicators {
  // Over CPU buffers (the TCP mesh or Gloo): hashes, evaluation sums, healing, replica checks.
  std::unique_ptr<Communicator> control;
  // Ranks on one host (CPU): float32 all-reduce through shared memory.
  std::unique_ptr<Communicator> shm;
  // Device cuda: NCCL for gradients and averaged parameters (device buffers).
  std::unique_ptr<Communicator> nccl;
  // Gradients and averaging: nccl on cuda, else shm, else control.
  Communicator* data = nullptr;
  // An island's or a cross group's: `data` seen from the whole generation,
  // its failures blaming generation ranks (subgroup_communicator.h); then
  // `data` points here. Declared after what it wraps: it goes first.
  std::unique_ptr<Communicator> subgroup_data;
  // sync.islands_by: where this rank stands among the islands, and the
  // communicators of its island and of its cross group (the ranks at its
  // position in every island; absent where that position owns no shard),
  // each built as this group is, over its own ranks.
  std::optional<IslandLayout> islands;
  std::unique_ptr<GroupCommunicators> island;
  std::unique_ptr<GroupCommunicators> cross;
};

// The join of a subgroup: `ranks` (ascending ranks of `join`, this rank
// among them) renumbered 0..n-1 in that order, with their peers.
v1::JoinGenerationResponse SubgroupJoin(const v1::JoinGenerationResponse& join, const std::vector<int>& ranks);

using CommunicatorFactory = std::function<absl::StatusOr<GroupCommunicators>(
    const v1::JoinGenerationResponse& join, const TrainingContext& context, CoordinatorLink* link)>;

// The real trainer's choice: `plane` always (the control communicator, and
// the data one when nothing below takes it); shared memory when every rank
// of a CPU job is on one host (sync.same_host_transport shm); NCCL on cuda.
// All bootstrap through the generation's store at the coordinator.
absl::StatusOr<GroupCommunicators> CreateGroupCommunicatorsOn(const v1::JoinGenerationResponse& join,
                                                              const TrainingContext& context, CoordinatorLink* link,
                                                              const DataPlaneOptions& plane);
// The same with the default DataPlaneOptions (the TCP mesh).
absl::StatusOr<GroupCommunicators> CreateGroupCommunicators(const v1::JoinGenerationResponse& join,
                                                            const TrainingContext& context, CoordinatorLink* link);
// CreateGroupCommunicatorsOn with `plane`, as a factory.
CommunicatorFactory GroupCommunicatorsOn(DataPlaneOptions plane);

}  // namespace herd
