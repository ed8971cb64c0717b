// How many connections per pair of ranks the TCP mesh forms, one collective
// on each at a time (tcp_mesh_communicator.h). Apart from the communicator
// so that flags and the trainer's arguments can name the bounds without
// linking the mesh.
#pragma once

namespace herd {

// Four: a streaming averaging job's fragments (4 by default) each keep a
// round on the wire, and gradient buckets overlap their round trips.
inline constexpr int kDefaultTcpMeshLanes = 4;
// More sockets per pair than this buys nothing and spends descriptors.
inline constexpr int kMaxTcpMeshLanes = 16;

}  // namespace herd
