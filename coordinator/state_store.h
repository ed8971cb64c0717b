// Where the coordinator keeps its ClusterState durably, so a restart (or, on
// etcd, another coordinator taking over) loses nothing that an RPC already
// acknowledged. Two stores implement it: SqliteStateStore (a file, the
// default) and EtcdStateStore (coordinator/etcd).
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/cluster_state.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

// Not thread-safe: the coordinator calls it under its own mutex.
class StateStore {
 public:
  virtual ~StateStore() = default;

  // Everything stored. Workers get last_heartbeat = now: a full lease to come
  // back after a coordinator restart.
  virtual absl::StatusOr<ClusterState> Load(double now) = 0;

  // Writes the jobs and workers named in `changes` (one write where the store
  // allows it; each store says how it keeps them consistent).
  virtual absl::Status Save(const ClusterState& state, const ChangeSet& changes) = 0;

  // Adds a committed checkpoint (an id already stored is an error) and
  // removes the ones retention dropped, in one write.
  virtual absl::Status SaveCheckpoint(const v1::CheckpointInfo& added,
                                      const std::vector<v1::CheckpointInfo>& dropped) = 0;
};

}  // namespace herd::coordinator
