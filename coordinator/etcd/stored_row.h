// A record as one etcd value: every column of its sql::Table description
// (coordinator/state_tables.h) by name, in a StoredRow message.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "coordinator/etcd/stored_row.pb.h"
#include "coordinator/sql_table.h"

namespace herd::coordinator {

// The value a column takes when a row has none: the DEFAULT of its SQL
// constraints (a row written before the column existed), as SQLite would.
// NOT_FOUND when the column has no default.
absl::StatusOr<sql::Value> ColumnDefault(const sql::ColumnSchema& column);

template <typename Record>
std::string EncodeRow(const sql::Table<Record>& table, const Record& record) {
  etcd::StoredRow row;
  for (const sql::Column<Record>& column : table.columns()) {
    const sql::Value value = column.write(record);
    etcd::StoredValue& stored = (*row.mutable_columns())[column.schema.name];
    if (const auto* integer = std::get_if<int64_t>(&value)) {
      stored.set_integer(*integer);
    } else if (const auto* real = std::get_if<double>(&value)) {
      stored.set_real(*real);
    } else if (column.schema.type == sql::Type::kBlob) {
      stored.set_blob(std::get<std::string>(value));
    } else {
      stored.set_text(std::get<std::string>(value));
    }
  }
  return row.SerializeAsString();
}

// `what` names the value in errors (its etcd key).
template <typename Record>
absl::Status DecodeRow(const sql::Table<Record>& table, const std::string& bytes, const std::string& what,
                       Record* record) {
  etcd::StoredRow row;
  if (!row.ParseFromString(bytes)) return absl::DataLossError(absl::StrCat(what, ": stored record does not parse"));
  for (const sql::Column<Record>& column : table.columns()) {
    sql::Value value;
    auto stored = row.columns().find(column.schema.name);
    if (stored == row.columns().end()) {
      absl::StatusOr<sql::Value> fallback = ColumnDefault(column.schema);
      if (!fallback.ok()) {
        return absl::DataLossError(absl::StrCat(what, ": no ", column.schema.name, " and it has no default"));
      }
      value = *fallback;
    } else {
      const etcd::StoredValue& cell = stored->second;
      const bool fits = column.schema.type == sql::Type::kInteger ? cell.has_integer()
                        : column.schema.type == sql::Type::kReal  ? cell.has_real()
                        : column.schema.type == sql::Type::kText  ? cell.has_text()
                                                                  : cell.has_blob();
      if (!fits) return absl::DataLossError(absl::StrCat(what, ": ", column.schema.name, " has the wrong type"));
      if (cell.has_integer()) value = cell.integer();
      if (cell.has_real()) value = cell.real();
      if (cell.has_text()) value = cell.text();
      if (cell.has_blob()) value = cell.blob();
    }
    if (auto status = column.read(*record, value); !status.ok()) {
      return absl::Status(status.code(), absl::StrCat(what, ": ", column.schema.name, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace herd::coordinator
