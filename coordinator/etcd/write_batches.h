// Splitting a store write into etcd transactions that fit etcd's limits
// (defaults: 128 operations and 1.5 MiB per request).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd::coordinator {

struct KeyValue {
  std::string key;
  std::string value;
};

struct TxnLimits {
  size_t max_ops = 128;  // etcd's --max-txn-ops default
  // Keys plus values per transaction: 1 MiB, leaving a third of etcd's
  // 1.5 MiB --max-request-bytes for framing and the fencing compare.
  size_t max_bytes = 1 << 20;
};

// `puts` in order, cut into consecutive batches of at most max_ops puts and
// max_bytes bytes. A single put over max_bytes is an error naming its key.
absl::StatusOr<std::vector<std::vector<KeyValue>>> SplitIntoTxns(std::vector<KeyValue> puts, const TxnLimits& limits);

}  // namespace herd::coordinator
