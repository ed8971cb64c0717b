#include "coordinator/sql_table.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_join.h"

namespace herd::coordinator::sql {
namespace {

// SQLite has no NaN: it binds one as NULL, which a NOT NULL column refuses
// (one diverging job's loss then failed every write). A NaN is stored as the
// TEXT 'NaN' instead (a REAL column keeps text that is no number as text);
// infinities are REAL values SQLite keeps as they are.
constexpr char kNaNText[] = "NaN";

const char* TypeName(Type type) {
  switch (type) {
    case Type::kInteger:
      return "INTEGER";
    case Type::kReal:
      return "REAL";
    case Type::kText:
      return "TEXT";
    case Type::kBlob:
      return "BLOB";
  }
  return "BLOB";
}

std::string Names(const std::vector<ColumnSchema>& columns) {
  return absl::StrJoin(columns, ", ", [](std::string* out, const ColumnSchema& column) { out->append(column.name); });
}

}  // namespace

Statement::Statement(sqlite3* db, const std::string& sql) : db_(db) {
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK) {
    status_ = Error("prepare");
    return;
  }
  for (int i = 0; i < sqlite3_column_count(stmt_); ++i) columns_[sqlite3_column_name(stmt_, i)] = i;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::Bind(const Value& value, Type type) {
  if (!status_.ok()) return *this;
  const int index = ++bound_;
  int rc = SQLITE_OK;
  if (const auto* integer = std::get_if<int64_t>(&value)) {
    rc = sqlite3_bind_int64(stmt_, index, *integer);
  } else if (const auto* real = std::get_if<double>(&value)) {
    rc = std::isnan(*real) ? sqlite3_bind_text(stmt_, index, kNaNText, -1, SQLITE_STATIC)
                           : sqlite3_bind_double(stmt_, index, *real);
  } else {
    const std::string& bytes = std::get<std::string>(value);
    rc = type == Type::kBlob
             ? sqlite3_bind_blob(stmt_, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT)
             : sqlite3_bind_text(stmt_, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  }
  if (rc != SQLITE_OK) status_ = Error("bind");
  return *this;
}

absl::Status Statement::Run() {
  if (!status_.ok()) return status_;
  if (sqlite3_step(stmt_) != SQLITE_DONE) return Error("step");
  return absl::OkStatus();
}

bool Statement::Next() {
  if (!status_.ok()) return false;
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc != SQLITE_DONE) status_ = Error("step");
  return false;
}

Value Statement::Get(const std::string& name, Type type) {
  auto it = columns_.find(name);
  if (it == columns_.end()) {
    if (status_.ok()) status_ = absl::InternalError(absl::StrCat("sqlite: no column ", name, " in the result"));
    return Value();
  }
  const int column = it->second;
  auto bytes = [&] {
    const void* data = sqlite3_column_blob(stmt_, column);
    int size = sqlite3_column_bytes(stmt_, column);
    return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), size);
  };
  switch (type) {
    case Type::kInteger:
      return Value(static_cast<int64_t>(sqlite3_column_int64(stmt_, column)));
    case Type::kReal:
      if (sqlite3_column_type(stmt_, column) == SQLITE_TEXT && bytes() == kNaNText) {
        return Value(std::numeric_limits<double>::quiet_NaN());
      }
      return Value(sqlite3_column_double(stmt_, column));
    case Type::kText:
    case Type::kBlob:
      return Value(bytes());
  }
  return Value();
}

absl::Status Statement::Error(const char* what) const {
  return absl::InternalError(absl::StrCat("sqlite ", what, ": ", sqlite3_errmsg(db_)));
}

absl::Status Exec(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error != nullptr ? error : sqlite3_errmsg(db);
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("sqlite: ", message));
  }
  return absl::OkStatus();
}

std::string CreateTableSql(const std::string& table, const std::vector<ColumnSchema>& columns) {
  return absl::StrCat("CREATE TABLE IF NOT EXISTS ", table, " (",
                      absl::StrJoin(columns, ", ",
                                    [](std::string* out, const ColumnSchema& column) {
                                      absl::StrAppend(out, column.name, " ", TypeName(column.type),
                                                      column.constraints.empty() ? "" : " ", column.constraints);
                                    }),
                      ")");
}

std::string InsertSql(const std::string& table, const std::vector<ColumnSchema>& columns, bool replace) {
  std::vector<std::string> marks(columns.size(), "?");
  return absl::StrCat(replace ? "INSERT OR REPLACE INTO " : "INSERT INTO ", table, " (", Names(columns), ") VALUES (",
                      absl::StrJoin(marks, ", "), ")");
}

std::string SelectSql(const std::string& table, const std::vector<ColumnSchema>& columns, const std::string& suffix) {
  return absl::StrCat("SELECT ", Names(columns), " FROM ", table, suffix);
}

absl::Status ColumnsInDatabase(sqlite3* db, const std::string& table, std::vector<std::string>* names) {
  names->clear();
  Statement select(db, "SELECT name FROM pragma_table_info(?)");
  select.Bind(table);
  while (select.Next()) names->push_back(std::get<std::string>(select.Get("name", Type::kText)));
  return select.status();
}

absl::Status AddMissingColumns(sqlite3* db, const std::string& table, const std::vector<ColumnSchema>& columns) {
  std::vector<std::string> existing;
  if (auto status = ColumnsInDatabase(db, table, &existing); !status.ok()) return status;
  for (const ColumnSchema& column : columns) {
    if (std::find(existing.begin(), existing.end(), column.name) != existing.end()) continue;
    const std::string sql = absl::StrCat("ALTER TABLE ", table, " ADD COLUMN ", column.name, " ", TypeName(column.type),
                                         " ", column.constraints);
    absl::Status status = Exec(db, sql);
    if (status.ok() && !column.backfill.empty()) status = Exec(db, column.backfill);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("adding column ", table, ".", column.name, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status DropRetiredColumns(sqlite3* db, const std::string& table, const std::vector<std::string>& retired) {
  std::vector<std::string> existing;
  if (auto status = ColumnsInDatabase(db, table, &existing); !status.ok()) return status;
  for (const std::string& name : retired) {
    if (std::find(existing.begin(), existing.end(), name) == existing.end()) continue;
    if (auto status = Exec(db, absl::StrCat("ALTER TABLE ", table, " DROP COLUMN ", name)); !status.ok()) {
      return absl::Status(status.code(), absl::StrCat("dropping column ", table, ".", name, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace herd::coordinator::sql
