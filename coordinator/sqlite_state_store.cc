#include "coordinator/sqlite_state_store.h"

#include <sqlite3.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/sql_table.h"
#include "coordinator/state_tables.h"

namespace herd::coordinator {
namespace {

absl::Status CreateOrMigrateTables(sqlite3* db) {
  if (auto status = JobsTable().Migrate(db); !status.ok()) return status;
  if (auto status = WorkersTable().Migrate(db); !status.ok()) return status;
  if (auto status = CheckpointsTable().Migrate(db); !status.ok()) return status;
  return sql::Exec(db, "CREATE INDEX IF NOT EXISTS checkpoints_by_job ON checkpoints (job_id, commit_seq)");
}

absl::Status LoadJobs(sqlite3* db, ClusterState* state) {
  return JobsTable().ReadAll(db, "", [&](JobRecord job) {
    state->next_submit_seq = std::max(state->next_submit_seq, job.submit_seq + 1);
    const std::string id = job.info.id();
    state->jobs[id] = std::move(job);
    return absl::OkStatus();
  });
}

absl::Status LoadWorkers(sqlite3* db, double now, ClusterState* state) {
  return WorkersTable().ReadAll(db, "", [&](WorkerRecord worker) {
    worker.last_heartbeat = now;
    const std::string id = worker.id;
    state->workers[id] = std::move(worker);
    return absl::OkStatus();
  });
}

absl::Status LoadCheckpoints(sqlite3* db, ClusterState* state) {
  return CheckpointsTable().ReadAll(db, " ORDER BY commit_seq", [&](StoredCheckpoint checkpoint) {
    state->checkpoints[checkpoint.info.job_id()].push_back(std::move(checkpoint.info));
    return absl::OkStatus();
  });
}

}  // namespace

template <typename Body>
absl::Status SqliteStateStore::InTransaction(Body body) {
  if (auto status = Exec("BEGIN IMMEDIATE"); !status.ok()) return status;
  absl::Status status = body();
  if (status.ok()) status = Exec("COMMIT");
  if (!status.ok()) Exec("ROLLBACK").IgnoreError();
  return status;
}

absl::StatusOr<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open state database ", path, ": ", message));
  }
  std::unique_ptr<SqliteStateStore> store(new SqliteStateStore(db));
  // WAL keeps readers cheap; FULL makes every acknowledged write survive a
  // power cut, not just a process kill.
  for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA busy_timeout=5000"}) {
    if (auto status = store->Exec(pragma); !status.ok()) return status;
  }
  // One transaction: a database is migrated whole or not at all.
  if (auto status = store->InTransaction([&] { return CreateOrMigrateTables(db); }); !status.ok()) return status;
  return store;
}

SqliteStateStore::~SqliteStateStore() { sqlite3_close(db_); }

absl::Status SqliteStateStore::Exec(const char* sql) { return sql::Exec(db_, sql); }

absl::StatusOr<ClusterState> SqliteStateStore::Load(double now) {
  ClusterState state;
  if (auto status = LoadJobs(db_, &state); !status.ok()) return status;
  if (auto status = LoadWorkers(db_, now, &state); !status.ok()) return status;
  if (auto status = LoadCheckpoints(db_, &state); !status.ok()) return status;
  AssignMembersOfRunningJobs(state);
  return state;
}

absl::Status SqliteStateStore::WriteJob(const JobRecord& job) { return JobsTable().Write(db_, job); }

absl::Status SqliteStateStore::WriteWorker(const WorkerRecord& worker) { return WorkersTable().Write(db_, worker); }

absl::Status SqliteStateStore::Write(const StateWrite& records, const std::function<void()>& committed) {
  if (records.empty()) {
    if (committed) committed();
    return absl::OkStatus();
  }
  absl::Status status = InTransaction([&]() -> absl::Status {
    for (const JobRecord& job : records.jobs) {
      if (auto status = WriteJob(job); !status.ok()) return status;
    }
    for (const WorkerRecord& worker : records.workers) {
      if (auto status = WriteWorker(worker); !status.ok()) return status;
    }
    return absl::OkStatus();
  });
  if (status.ok() && committed) committed();
  return status;
}

absl::Status SqliteStateStore::SaveCheckpoint(const v1::CheckpointInfo& added,
                                        const std::vector<v1::CheckpointInfo>& dropped) {
  return InTransaction([&]() -> absl::Status {
    // Commit order across jobs: one past the newest row.
    sql::Statement newest(db_, "SELECT IFNULL(MAX(commit_seq), 0) AS newest FROM checkpoints");
    if (!newest.Next()) return newest.status().ok() ? absl::InternalError("sqlite: no MAX row") : newest.status();
    const int64_t newest_seq = std::get<int64_t>(newest.Get("newest", sql::Type::kInteger));
    if (auto inserted = CheckpointsTable().Add(db_, StoredCheckpoint{added, newest_seq + 1}); !inserted.ok()) {
      return inserted;
    }
    for (const v1::CheckpointInfo& old : dropped) {
      absl::Status deleted = sql::Statement(db_, "DELETE FROM checkpoints WHERE id = ?").Bind(old.id()).Run();
      if (!deleted.ok()) return deleted;
    }
    return absl::OkStatus();
  });
}

}  // namespace herd::coordinator
