// The TCP mesh's Communicator (backend "tcp"): herd's own TCP connections,
// member-authenticated sockets between every pair of ranks
// (tcp_mesh_formation.h), one per lane.
// The trainers' CPU data plane with --data-plane=tcp
// (worker/train/group_communicators.h). Every collective moves each rank's
// share straight to the rank that needs it (a reduce-scatter, then an
// all-gather, for all-reduce), so each rank sends and receives about
// 2 (N-1)/N of a buffer, over N-1 sockets at once.
//
// Sums: rank r sums block r of NearEqualRanges in rank order 0, 1, ...,
// N-1, so every rank gets the same bits; ReduceScatterLayout is
// NearEqualRanges, and all-reduce and reduce-scatter add in the same order.
// float16 and bfloat16 are summed through float, rounded to nearest even
// after each addition (as Gloo does).
//
// Lanes: `lanes` meshes are formed at once, and collective number s runs
// over mesh s % lanes (CollectiveQueue::Lanes), so up to `lanes` ops are on
// the wire together. On a long link an op is mostly waiting for its round
// trips: an averaging round of one fragment no longer queues behind
// another's, and a gradient bucket's reduce-scatter goes out while the
// previous bucket's all-gather is still arriving. Each op still has its
// sockets to itself, so its bytes never interleave with another op's.
//
// Failure rule as for every backend (communicator.h): each op is bounded by
// `timeout` (DEADLINE_EXCEEDED), a peer that closed its socket fails it with
// UNAVAILABLE, and the first failure breaks the communicator (ABORTED after).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/tcp_mesh_formation.h"
#include "worker/comm/tcp_mesh_lanes.h"

namespace herd {

struct TcpMeshOptions {
  TcpMeshFormationOptions mesh;  // rank, world size, generation, hosts, formation timeout
  std::chrono::milliseconds timeout{30000};  // per collective
  // Meshes formed, one op at a time on each (see above); at least 1.
  int lanes = kDefaultTcpMeshLanes;
  // Each socket's congestion control (tcp_path.h); empty: the kernel's default.
  std::string congestion_control = "bbr";
};

// What the mesh's sockets use, for the trainer's log.
struct TcpMeshSetup {
  std::string congestion_control;  // as the kernel reports it after the choice
  std::string note;                // why it is not the one asked for, if it is not
};

// Forms the mesh (FormTcpMesh) and returns the communicator over it.
absl::StatusOr<std::unique_ptr<Communicator>> CreateTcpMeshCommunicator(RendezvousStore& store,
                                                                        const TcpMeshOptions& options,
                                                                        TcpMeshSetup* setup = nullptr);

}  // namespace herd
