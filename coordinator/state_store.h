// Where the coordinator keeps its ClusterState durably, so a restart (or, on
// etcd, another coordinator taking over) loses nothing that an RPC already
// acknowledged. Two stores implement it: SqliteStateStore (a file, the
// default) and EtcdStateStore (coordinator/etcd).
#pragma once

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/cluster_state.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

// Copies of the records a change touched: taken under the coordinator's
// lock, written after it is released (coordinator/write_turns.h).
struct StateWrite {
  std::vector<JobRecord> jobs;
  std::vector<WorkerRecord> workers;

  bool empty() const { return jobs.empty() && workers.empty(); }
  size_t size() const { return jobs.size() + workers.size(); }
};

// The jobs and workers named in `changes` that `state` holds.
StateWrite Snapshot(const ClusterState& state, const ChangeSet& changes);

// Not thread-safe: the coordinator writes one StateWrite at a time, in the
// order of its changes.
class StateStore {
 public:
  virtual ~StateStore() = default;

  // Everything stored. Workers get last_heartbeat = now: a full lease to come
  // back after a coordinator restart.
  virtual absl::StatusOr<ClusterState> Load(double now) = 0;

  // Writes the records (one write where the store allows it; each store
  // says how it keeps them consistent). `committed` (if set) is called once
  // the records are durable, before any further work the write does (on
  // etcd, a large write is committed by one transaction and its records
  // are put after it): what waits for the change need not wait for that.
  virtual absl::Status Write(const StateWrite& records, const std::function<void()>& committed) = 0;
  absl::Status Write(const StateWrite& records) { return Write(records, nullptr); }

  // Writes the jobs and workers named in `changes`.
  absl::Status Save(const ClusterState& state, const ChangeSet& changes) { return Write(Snapshot(state, changes)); }

  // Adds a committed checkpoint (an id already stored is an error) and
  // removes the ones retention dropped, in one write.
  virtual absl::Status SaveCheckpoint(const v1::CheckpointInfo& added,
                                      const std::vector<v1::CheckpointInfo>& dropped) = 0;
};

}  // namespace herd::coordinator
