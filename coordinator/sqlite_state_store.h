// The coordinator's ClusterState in SQLite (WAL journal, synchronous=FULL),
// so a restart, even after SIGKILL, loses nothing that an RPC already
// acknowledged. The default store (--state-dir, --store=sqlite:PATH).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/cluster_state.h"
#include "coordinator/state_store.h"

struct sqlite3;

namespace herd::coordinator {

// Not thread-safe (see StateStore).
class SqliteStateStore : public StateStore {
 public:
  // Opens (creating if needed) the database file and its tables.
  static absl::StatusOr<std::unique_ptr<SqliteStateStore>> Open(const std::string& path);
  ~SqliteStateStore() override;
  SqliteStateStore(const SqliteStateStore&) = delete;
  SqliteStateStore& operator=(const SqliteStateStore&) = delete;

  absl::StatusOr<ClusterState> Load(double now) override;
  // One transaction.
  using StateStore::Write;
  absl::Status Write(const StateWrite& records, const std::function<void()>& committed) override;
  // One transaction.
  absl::Status SaveCheckpoint(const v1::CheckpointInfo& added, const std::vector<v1::CheckpointInfo>& dropped) override;

 private:
  explicit SqliteStateStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql);
  absl::Status WriteJob(const JobRecord& job);
  absl::Status WriteWorker(const WorkerRecord& worker);
  // Runs `body` between BEGIN IMMEDIATE and COMMIT, rolling back on error.
  template <typename Body>
  absl::Status InTransaction(Body body);

  sqlite3* db_;
};

}  // namespace herd::coordinator
