// Which store keeps the coordinator's state: --state-dir / --store=sqlite:PATH
// (SQLite, the default) or --store=etcd://HOST:PORT,HOST:PORT (etcd).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd::coordinator {

struct StoreSpec {
  enum class Kind { kSqlite, kEtcd };
  Kind kind = Kind::kSqlite;
  std::string sqlite_path;                  // kSqlite: the database file
  std::vector<std::string> etcd_endpoints;  // kEtcd: host:port each
};

// Reads --store's value; an error names what is wrong with it.
absl::StatusOr<StoreSpec> ParseStoreSpec(const std::string& flag);

// The etcd key prefix from --etcd-prefix: starts and ends with "/".
absl::StatusOr<std::string> NormalizeEtcdPrefix(const std::string& flag);

}  // namespace herd::coordinator
