#include "coordinator/state_store.h"

#include <sqlite3.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace herd::coordinator {
namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  submit_seq INTEGER NOT NULL,
  spec BLOB NOT NULL,
  state INTEGER NOT NULL,
  reason TEXT NOT NULL,
  step INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  world_size INTEGER NOT NULL,
  samples_in_epoch INTEGER NOT NULL,
  samples_per_second REAL NOT NULL,
  loss REAL NOT NULL,
  eval TEXT NOT NULL,
  total_steps INTEGER NOT NULL,
  generation INTEGER NOT NULL,
  next_generation INTEGER NOT NULL,
  members TEXT NOT NULL,
  finished TEXT NOT NULL,
  created_unix REAL NOT NULL,
  updated_unix REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
  id TEXT PRIMARY KEY,
  address TEXT NOT NULL,
  device_kind TEXT NOT NULL,
  device_count INTEGER NOT NULL,
  state INTEGER NOT NULL,
  job_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (
  id TEXT PRIMARY KEY,
  job_id TEXT NOT NULL,
  commit_seq INTEGER NOT NULL,
  step INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  generation INTEGER NOT NULL,
  path TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  created_unix REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS checkpoints_by_job ON checkpoints (job_id, commit_seq);
)sql";

// Columns added after the first schema: ALTER TABLE adds them to databases
// created before, with defaults that describe those older rows.
struct AddedColumn {
  const char* table;
  const char* name;
  const char* definition;
};
constexpr AddedColumn kAddedColumns[] = {
    {"jobs", "gen_formed", "INTEGER NOT NULL DEFAULT 1"},
    {"jobs", "gen_reason", "TEXT NOT NULL DEFAULT ''"},
    {"jobs", "gen_started_unix", "REAL NOT NULL DEFAULT 0"},
    {"jobs", "gen_start_step", "INTEGER NOT NULL DEFAULT 0"},
    {"jobs", "gen_epoch", "INTEGER NOT NULL DEFAULT 0"},
    {"jobs", "gen_samples_in_epoch", "INTEGER NOT NULL DEFAULT 0"},
    {"jobs", "gen_heal_from_rank", "INTEGER NOT NULL DEFAULT -1"},
    {"jobs", "gen_committed", "INTEGER NOT NULL DEFAULT 0"},
    {"jobs", "restarts_used", "INTEGER NOT NULL DEFAULT 0"},
    {"jobs", "last_failure", "TEXT NOT NULL DEFAULT ''"},
    {"jobs", "waiting_since", "REAL NOT NULL DEFAULT 0"},
    {"jobs", "owner", "TEXT NOT NULL DEFAULT ''"},
    {"jobs", "release_requested", "TEXT NOT NULL DEFAULT '{}'"},
    {"workers", "cordoned", "INTEGER NOT NULL DEFAULT 0"},
    {"checkpoints", "samples_in_epoch", "INTEGER NOT NULL DEFAULT 0"},
    {"jobs", "warning", "TEXT NOT NULL DEFAULT ''"},
    {"jobs", "learning_rate", "REAL NOT NULL DEFAULT 0"},
};

// SQLite has no NaN: it binds one as NULL, which a NOT NULL column refuses
// (one diverging job's loss then failed every write). A NaN is stored as the
// TEXT 'NaN' instead (a REAL column keeps text that is no number as text);
// infinities are REAL values SQLite keeps as they are.
constexpr char kNaNText[] = "NaN";

// A prepared statement that binds by position (1-based, in call order) and
// finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) status_ = Error("prepare");
  }
  ~Statement() { sqlite3_finalize(stmt_); }

  Statement& Bind(int64_t value) {
    if (status_.ok() && sqlite3_bind_int64(stmt_, ++bound_, value) != SQLITE_OK) status_ = Error("bind");
    return *this;
  }
  Statement& Bind(double value) {
    if (std::isnan(value)) return Bind(std::string(kNaNText));
    if (status_.ok() && sqlite3_bind_double(stmt_, ++bound_, value) != SQLITE_OK) status_ = Error("bind");
    return *this;
  }
  Statement& Bind(const std::string& value) {
    if (status_.ok() && sqlite3_bind_text(stmt_, ++bound_, value.data(), static_cast<int>(value.size()),
                                          SQLITE_TRANSIENT) != SQLITE_OK) {
      status_ = Error("bind");
    }
    return *this;
  }
  Statement& BindBlob(const std::string& value) {
    if (status_.ok() && sqlite3_bind_blob(stmt_, ++bound_, value.data(), static_cast<int>(value.size()),
                                          SQLITE_TRANSIENT) != SQLITE_OK) {
      status_ = Error("bind");
    }
    return *this;
  }

  // Runs a statement that returns no rows.
  absl::Status Run() {
    if (!status_.ok()) return status_;
    if (sqlite3_step(stmt_) != SQLITE_DONE) return Error("step");
    return absl::OkStatus();
  }
  // Advances to the next row; false at the end or on error (see status()).
  bool Next() {
    if (!status_.ok()) return false;
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) status_ = Error("step");
    return false;
  }
  const absl::Status& status() const { return status_; }

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  double Real(int column) const {
    if (sqlite3_column_type(stmt_, column) == SQLITE_TEXT && Text(column) == kNaNText) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    return sqlite3_column_double(stmt_, column);
  }
  std::string Text(int column) const {
    const void* data = sqlite3_column_blob(stmt_, column);
    int size = sqlite3_column_bytes(stmt_, column);
    return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), size);
  }

 private:
  absl::Status Error(const char* what) const {
    return absl::InternalError(absl::StrCat("sqlite ", what, ": ", sqlite3_errmsg(db_)));
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int bound_ = 0;
  absl::Status status_;
};

// Worker ids are restricted to [A-Za-z0-9._-], so a comma is a safe separator.
std::string JoinIds(const std::vector<std::string>& ids) { return absl::StrJoin(ids, ","); }
std::vector<std::string> SplitIds(const std::string& text) { return absl::StrSplit(text, ',', absl::SkipEmpty()); }

// JSON has no NaN or infinity (nlohmann writes them as null): those are
// written as the strings "NaN", "Infinity" and "-Infinity", as proto3's JSON
// mapping does.
std::string EvalToJson(const google::protobuf::Map<std::string, double>& eval) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [name, value] : eval) {
    if (std::isfinite(value)) {
      json[name] = value;
    } else {
      json[name] = std::isnan(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity";
    }
  }
  return json.dump();
}

void EvalFromJson(const std::string& text, google::protobuf::Map<std::string, double>* eval) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return;
  for (const auto& [name, value] : json.items()) {
    if (value.is_number()) {
      (*eval)[name] = value.get<double>();
    } else if (value == "NaN") {
      (*eval)[name] = std::numeric_limits<double>::quiet_NaN();
    } else if (value == "Infinity" || value == "-Infinity") {
      (*eval)[name] = (value == "Infinity" ? 1 : -1) * std::numeric_limits<double>::infinity();
    }
  }
}

std::string ReleasesToJson(const std::map<std::string, std::string>& releases) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [worker, reason] : releases) json[worker] = reason;
  return json.dump();
}

std::map<std::string, std::string> ReleasesFromJson(const std::string& text) {
  std::map<std::string, std::string> releases;
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return releases;
  for (const auto& [worker, reason] : json.items()) {
    if (reason.is_string()) releases[worker] = reason.get<std::string>();
  }
  return releases;
}

absl::Status AddMissingColumns(sqlite3* db) {
  for (const AddedColumn& column : kAddedColumns) {
    Statement existing(db, "SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?");
    existing.Bind(std::string(column.table)).Bind(std::string(column.name));
    if (!existing.Next()) return existing.status();
    if (existing.Int(0) > 0) continue;
    const std::string sql =
        absl::StrCat("ALTER TABLE ", column.table, " ADD COLUMN ", column.name, " ", column.definition);
    if (auto status = Statement(db, sql.c_str()).Run(); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status LoadJobs(sqlite3* db, ClusterState* state) {
  Statement select(db,
                   "SELECT id, submit_seq, spec, state, reason, step, epoch, world_size, samples_in_epoch, "
                   "samples_per_second, loss, eval, total_steps, generation, next_generation, members, "
                   "finished, created_unix, updated_unix, gen_formed, gen_reason, gen_started_unix, "
                   "gen_start_step, gen_epoch, gen_samples_in_epoch, gen_heal_from_rank, gen_committed, "
                   "restarts_used, last_failure, waiting_since, owner, release_requested, warning, learning_rate "
                   "FROM jobs");
  while (select.Next()) {
    JobRecord& job = state->jobs[select.Text(0)];
    v1::JobInfo& info = job.info;
    info.set_id(select.Text(0));
    job.submit_seq = select.Int(1);
    if (!info.mutable_spec()->ParseFromString(select.Text(2))) {
      return absl::DataLossError(absl::StrCat("job ", info.id(), ": stored spec does not parse"));
    }
    info.set_name(info.spec().name());
    info.set_state(static_cast<v1::JobState>(select.Int(3)));
    info.set_reason(select.Text(4));
    info.set_step(select.Int(5));
    info.set_epoch(select.Int(6));
    info.set_world_size(select.Int(7));
    info.set_samples_in_epoch(select.Int(8));
    info.set_samples_per_second(select.Real(9));
    info.set_loss(select.Real(10));
    EvalFromJson(select.Text(11), info.mutable_eval());
    info.set_total_steps(select.Int(12));
    job.generation.number = select.Int(13);
    info.set_generation(job.generation.number);
    job.next_generation = select.Int(14);
    job.generation.members = SplitIds(select.Text(15));
    for (const auto& member : job.generation.members) info.add_workers(member);
    for (const auto& member : SplitIds(select.Text(16))) job.generation.finished.insert(member);
    info.set_created_unix(select.Real(17));
    info.set_updated_unix(select.Real(18));
    Generation& generation = job.generation;
    generation.formed = select.Int(19) != 0;
    generation.reason = select.Text(20);
    generation.started_at = select.Real(21);
    generation.start_step = select.Int(22);
    generation.epoch = select.Int(23);
    generation.samples_in_epoch = select.Int(24);
    generation.heal_from_rank = select.Int(25);
    generation.committed = select.Int(26) != 0;
    job.restarts_used = select.Int(27);
    job.last_failure = select.Text(28);
    job.waiting_since = select.Real(29);
    info.set_owner(select.Text(30));
    job.release_requested = ReleasesFromJson(select.Text(31));
    info.set_warning(select.Text(32));
    info.set_learning_rate(select.Real(33));
    state->next_submit_seq = std::max(state->next_submit_seq, job.submit_seq + 1);
  }
  return select.status();
}

absl::Status LoadWorkers(sqlite3* db, double now, ClusterState* state) {
  Statement select(db, "SELECT id, address, device_kind, device_count, state, job_id, cordoned FROM workers");
  while (select.Next()) {
    WorkerRecord& worker = state->workers[select.Text(0)];
    worker.id = select.Text(0);
    worker.address = select.Text(1);
    worker.device_kind = select.Text(2);
    worker.device_count = select.Int(3);
    worker.state = static_cast<v1::WorkerState>(select.Int(4));
    worker.job_id = select.Text(5);
    worker.cordoned = select.Int(6) != 0;
    worker.last_heartbeat = now;
  }
  return select.status();
}

absl::Status LoadCheckpoints(sqlite3* db, ClusterState* state) {
  Statement select(db,
                   "SELECT id, job_id, step, epoch, generation, path, size_bytes, sha256, created_unix, "
                   "samples_in_epoch FROM checkpoints ORDER BY commit_seq");
  while (select.Next()) {
    v1::CheckpointInfo& checkpoint = state->checkpoints[select.Text(1)].emplace_back();
    checkpoint.set_id(select.Text(0));
    checkpoint.set_job_id(select.Text(1));
    checkpoint.set_step(select.Int(2));
    checkpoint.set_epoch(select.Int(3));
    checkpoint.set_generation(select.Int(4));
    checkpoint.set_path(select.Text(5));
    checkpoint.set_size_bytes(select.Int(6));
    checkpoint.set_sha256(select.Text(7));
    checkpoint.set_created_unix(select.Real(8));
    checkpoint.set_samples_in_epoch(select.Int(9));
  }
  return select.status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open state database ", path, ": ", message));
  }
  std::unique_ptr<StateStore> store(new StateStore(db));
  // WAL keeps readers cheap; FULL makes every acknowledged write survive a
  // power cut, not just a process kill.
  for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA busy_timeout=5000"}) {
    if (auto status = store->Exec(pragma); !status.ok()) return status;
  }
  if (auto status = store->Exec(kSchema); !status.ok()) return status;
  if (auto status = AddMissingColumns(db); !status.ok()) return status;
  return store;
}

StateStore::~StateStore() { sqlite3_close(db_); }

absl::Status StateStore::Exec(const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error != nullptr ? error : sqlite3_errmsg(db_);
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("sqlite: ", message));
  }
  return absl::OkStatus();
}

template <typename Body>
absl::Status StateStore::InTransaction(Body body) {
  if (auto status = Exec("BEGIN IMMEDIATE"); !status.ok()) return status;
  absl::Status status = body();
  if (status.ok()) status = Exec("COMMIT");
  if (!status.ok()) Exec("ROLLBACK").IgnoreError();
  return status;
}

absl::StatusOr<ClusterState> StateStore::Load(double now) {
  ClusterState state;
  if (auto status = LoadJobs(db_, &state); !status.ok()) return status;
  if (auto status = LoadWorkers(db_, now, &state); !status.ok()) return status;
  if (auto status = LoadCheckpoints(db_, &state); !status.ok()) return status;
  return state;
}

absl::Status StateStore::WriteJob(const JobRecord& job) {
  const v1::JobInfo& info = job.info;
  const Generation& generation = job.generation;
  std::vector<std::string> finished(generation.finished.begin(), generation.finished.end());
  return Statement(db_,
                   "INSERT OR REPLACE INTO jobs (id, submit_seq, spec, state, reason, step, epoch, world_size, "
                   "samples_in_epoch, samples_per_second, loss, eval, total_steps, generation, next_generation, "
                   "members, finished, created_unix, updated_unix, gen_formed, gen_reason, gen_started_unix, "
                   "gen_start_step, gen_epoch, gen_samples_in_epoch, gen_heal_from_rank, gen_committed, "
                   "restarts_used, last_failure, waiting_since, owner, release_requested, warning, learning_rate) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                   "?, ?, ?, ?, ?)")
      .Bind(info.id())
      .Bind(job.submit_seq)
      .BindBlob(info.spec().SerializeAsString())
      .Bind(static_cast<int64_t>(info.state()))
      .Bind(info.reason())
      .Bind(info.step())
      .Bind(info.epoch())
      .Bind(info.world_size())
      .Bind(info.samples_in_epoch())
      .Bind(info.samples_per_second())
      .Bind(info.loss())
      .Bind(EvalToJson(info.eval()))
      .Bind(info.total_steps())
      .Bind(job.generation.number)
      .Bind(job.next_generation)
      .Bind(JoinIds(job.generation.members))
      .Bind(JoinIds(finished))
      .Bind(info.created_unix())
      .Bind(info.updated_unix())
      .Bind(static_cast<int64_t>(generation.formed))
      .Bind(generation.reason)
      .Bind(generation.started_at)
      .Bind(generation.start_step)
      .Bind(generation.epoch)
      .Bind(generation.samples_in_epoch)
      .Bind(generation.heal_from_rank)
      .Bind(static_cast<int64_t>(generation.committed))
      .Bind(job.restarts_used)
      .Bind(job.last_failure)
      .Bind(job.waiting_since)
      .Bind(info.owner())
      .Bind(ReleasesToJson(job.release_requested))
      .Bind(info.warning())
      .Bind(info.learning_rate())
      .Run();
}

absl::Status StateStore::WriteWorker(const WorkerRecord& worker) {
  return Statement(db_,
                   "INSERT OR REPLACE INTO workers (id, address, device_kind, device_count, state, job_id, "
                   "cordoned) VALUES (?, ?, ?, ?, ?, ?, ?)")
      .Bind(worker.id)
      .Bind(worker.address)
      .Bind(worker.device_kind)
      .Bind(worker.device_count)
      .Bind(static_cast<int64_t>(worker.state))
      .Bind(worker.job_id)
      .Bind(static_cast<int64_t>(worker.cordoned))
      .Run();
}

absl::Status StateStore::Save(const ClusterState& state, const ChangeSet& changes) {
  if (changes.empty()) return absl::OkStatus();
  return InTransaction([&]() -> absl::Status {
    for (const std::string& id : changes.jobs) {
      auto it = state.jobs.find(id);
      if (it == state.jobs.end()) continue;
      if (auto status = WriteJob(it->second); !status.ok()) return status;
    }
    for (const std::string& id : changes.workers) {
      auto it = state.workers.find(id);
      if (it == state.workers.end()) continue;
      if (auto status = WriteWorker(it->second); !status.ok()) return status;
    }
    return absl::OkStatus();
  });
}

absl::Status StateStore::SaveCheckpoint(const v1::CheckpointInfo& added,
                                        const std::vector<v1::CheckpointInfo>& dropped) {
  return InTransaction([&]() -> absl::Status {
    absl::Status inserted =
        Statement(db_,
                  "INSERT INTO checkpoints (id, job_id, commit_seq, step, epoch, generation, path, size_bytes, "
                  "sha256, created_unix, samples_in_epoch) VALUES (?, ?, (SELECT IFNULL(MAX(commit_seq), 0) + 1 "
                  "FROM checkpoints), ?, ?, ?, ?, ?, ?, ?, ?)")
            .Bind(added.id())
            .Bind(added.job_id())
            .Bind(added.step())
            .Bind(added.epoch())
            .Bind(added.generation())
            .Bind(added.path())
            .Bind(added.size_bytes())
            .Bind(added.sha256())
            .Bind(added.created_unix())
            .Bind(added.samples_in_epoch())
            .Run();
    if (!inserted.ok()) return inserted;
    for (const v1::CheckpointInfo& old : dropped) {
      absl::Status deleted = Statement(db_, "DELETE FROM checkpoints WHERE id = ?").Bind(old.id()).Run();
      if (!deleted.ok()) return deleted;
    }
    return absl::OkStatus();
  });
}

}  // namespace herd::coordinator
