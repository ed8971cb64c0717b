// A SQLite table described once, by column name: each column says its SQL
// type and constraints and how it is read from and written to the C++
// record. The CREATE statement, the columns added to (or retired from) an
// older database, the SELECT list and the INSERT binds are all derived from
// that one description, and a row is read by column name, so nothing has to
// line up by position.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

struct sqlite3;
struct sqlite3_stmt;

namespace herd::coordinator::sql {

enum class Type { kInteger, kReal, kText, kBlob };

// A value as a column of that type holds it: INTEGER int64_t, REAL double,
// TEXT and BLOB std::string (the BLOB's bytes).
using Value = std::variant<int64_t, double, std::string>;

// A column apart from its record: what the schema needs.
struct ColumnSchema {
  std::string name;
  Type type;
  // What follows the type in CREATE TABLE: "PRIMARY KEY", "NOT NULL",
  // "NOT NULL DEFAULT 0". A column added to an existing table
  // (AddMissingColumns) needs a default when NOT NULL: it describes the
  // rows written before the column existed.
  std::string constraints;
  // SQL run once, right after the column is added to an existing table: it
  // sets the column for rows the default does not describe ("": none).
  std::string backfill;
};

// A prepared statement that binds by position (1-based, in call order) and
// finalizes itself. A NaN is stored as the TEXT 'NaN': SQLite binds a NaN
// as NULL, which NOT NULL columns refuse.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& Bind(const Value& value, Type type);
  Statement& Bind(int64_t value) { return Bind(Value(value), Type::kInteger); }
  Statement& Bind(const std::string& value) { return Bind(Value(value), Type::kText); }

  // Runs a statement that returns no rows.
  absl::Status Run();
  // Advances to the next row; false at the end or on error (see status()).
  bool Next();
  const absl::Status& status() const { return status_; }

  // The current row's value of the column named `name` (of the SELECT
  // list), read as `type`. An unknown name is an error in status().
  Value Get(const std::string& name, Type type);

 private:
  absl::Status Error(const char* what) const;

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int bound_ = 0;
  std::map<std::string, int> columns_;  // SELECT list name -> index
  absl::Status status_;
};

// Runs SQL that returns no rows (several statements allowed).
absl::Status Exec(sqlite3* db, const std::string& sql);

std::string CreateTableSql(const std::string& table, const std::vector<ColumnSchema>& columns);
// "INSERT [OR REPLACE] INTO table (a, b) VALUES (?, ?)".
std::string InsertSql(const std::string& table, const std::vector<ColumnSchema>& columns, bool replace);
// "SELECT a, b FROM table" followed by `suffix` (e.g. " ORDER BY a").
std::string SelectSql(const std::string& table, const std::vector<ColumnSchema>& columns, const std::string& suffix);
// The names of the table's columns in the database, in order.
absl::Status ColumnsInDatabase(sqlite3* db, const std::string& table, std::vector<std::string>* names);
// ALTER TABLE ADD COLUMN for every described column the table lacks.
absl::Status AddMissingColumns(sqlite3* db, const std::string& table, const std::vector<ColumnSchema>& columns);
// ALTER TABLE DROP COLUMN for every one of `retired` the table still has.
absl::Status DropRetiredColumns(sqlite3* db, const std::string& table, const std::vector<std::string>& retired);

// One column of a table of `Record`s.
template <typename Record>
struct Column {
  ColumnSchema schema;
  std::function<Value(const Record&)> write;
  // Sets the record's field from the stored value; an error names what is
  // wrong with it.
  std::function<absl::Status(Record&, const Value&)> read;

  // `get` returns the column's value (convertible to int64_t, double or
  // std::string as the type says); `set` takes it and returns void or an
  // absl::Status.
  template <typename T, typename Get, typename Set>
  static Column Of(std::string name, Type type, std::string constraints, Get get, Set set) {
    Column column;
    column.schema = {std::move(name), type, std::move(constraints)};
    column.write = [get](const Record& record) -> Value { return Value(T(get(record))); };
    column.read = [set](Record& record, const Value& value) -> absl::Status {
      if constexpr (std::is_void_v<decltype(set(record, std::get<T>(value)))>) {
        set(record, std::get<T>(value));
        return absl::OkStatus();
      } else {
        return set(record, std::get<T>(value));
      }
    };
    return column;
  }
  Column WithBackfill(std::string sql) && {
    schema.backfill = std::move(sql);
    return std::move(*this);
  }

  template <typename Get, typename Set>
  static Column Integer(std::string name, std::string constraints, Get get, Set set) {
    return Of<int64_t>(std::move(name), Type::kInteger, std::move(constraints), get, set);
  }
  template <typename Get, typename Set>
  static Column Real(std::string name, std::string constraints, Get get, Set set) {
    return Of<double>(std::move(name), Type::kReal, std::move(constraints), get, set);
  }
  template <typename Get, typename Set>
  static Column Text(std::string name, std::string constraints, Get get, Set set) {
    return Of<std::string>(std::move(name), Type::kText, std::move(constraints), get, set);
  }
  template <typename Get, typename Set>
  static Column Blob(std::string name, std::string constraints, Get get, Set set) {
    return Of<std::string>(std::move(name), Type::kBlob, std::move(constraints), get, set);
  }
};

// A table of `Record`s, one row each.
template <typename Record>
class Table {
 public:
  // `retired`: columns an older version wrote and nothing reads any more;
  // Migrate drops them.
  Table(std::string name, std::vector<Column<Record>> columns, std::vector<std::string> retired = {})
      : name_(std::move(name)), columns_(std::move(columns)), retired_(std::move(retired)) {
    for (const Column<Record>& column : columns_) schema_.push_back(column.schema);
  }

  const std::string& name() const { return name_; }
  const std::vector<ColumnSchema>& schema() const { return schema_; }
  // The description itself: other stores write the same rows (etcd).
  const std::vector<Column<Record>>& columns() const { return columns_; }

  // Creates the table, or brings an older one to this description: adds
  // the columns it lacks and drops the retired ones it has.
  absl::Status Migrate(sqlite3* db) const {
    if (auto status = Exec(db, CreateTableSql(name_, schema_)); !status.ok()) return status;
    if (auto status = AddMissingColumns(db, name_, schema_); !status.ok()) return status;
    return DropRetiredColumns(db, name_, retired_);
  }

  // Writes the record's row, replacing one with the same primary key.
  absl::Status Write(sqlite3* db, const Record& record) const { return Insert(db, record, /*replace=*/true); }
  // Adds the record's row; one with the same primary key is an error.
  absl::Status Add(sqlite3* db, const Record& record) const { return Insert(db, record, /*replace=*/false); }

  // Reads every row (the SELECT followed by `suffix`, e.g. " ORDER BY x")
  // and hands each record to `each`, which may refuse it with an error.
  template <typename Each>
  absl::Status ReadAll(sqlite3* db, const std::string& suffix, Each each) const {
    Statement select(db, SelectSql(name_, schema_, suffix));
    while (select.Next()) {
      Record record{};
      for (const Column<Record>& column : columns_) {
        Value value = select.Get(column.schema.name, column.schema.type);
        if (!select.status().ok()) return select.status();
        if (auto status = column.read(record, value); !status.ok()) {
          return absl::Status(status.code(), absl::StrCat(name_, ".", column.schema.name, ": ", status.message()));
        }
      }
      if (auto status = each(std::move(record)); !status.ok()) return status;
    }
    return select.status();
  }

 private:
  absl::Status Insert(sqlite3* db, const Record& record, bool replace) const {
    Statement insert(db, InsertSql(name_, schema_, replace));
    for (const Column<Record>& column : columns_) insert.Bind(column.write(record), column.schema.type);
    return insert.Run();
  }

  std::string name_;
  std::vector<Column<Record>> columns_;
  std::vector<std::string> retired_;
  std::vector<ColumnSchema> schema_;
};

}  // namespace herd::coordinator::sql
