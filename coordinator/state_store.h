// Durable copy of the coordinator's ClusterState in SQLite (WAL journal,
// synchronous=FULL), so a restart, even after SIGKILL, loses nothing that an
// RPC already acknowledged.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/cluster_state.h"

struct sqlite3;

namespace herd::coordinator {

// Not thread-safe: the coordinator calls it under its own mutex.
class StateStore {
 public:
  // Opens (creating if needed) the database file and its tables.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(const std::string& path);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // Everything stored. Workers get last_heartbeat = now: a full lease to come
  // back after a coordinator restart.
  absl::StatusOr<ClusterState> Load(double now);

  // Writes the jobs and workers named in `changes` in one transaction.
  absl::Status Save(const ClusterState& state, const ChangeSet& changes);

  // Adds a committed checkpoint and removes the ones retention dropped, in one
  // transaction.
  absl::Status SaveCheckpoint(const v1::CheckpointInfo& added, const std::vector<v1::CheckpointInfo>& dropped);

 private:
  explicit StateStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql);
  absl::Status WriteJob(const JobRecord& job);
  absl::Status WriteWorker(const WorkerRecord& worker);
  // Runs `body` between BEGIN IMMEDIATE and COMMIT, rolling back on error.
  template <typename Body>
  absl::Status InTransaction(Body body);

  sqlite3* db_;
};

}  // namespace herd::coordinator
