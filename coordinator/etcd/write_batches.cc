#include "coordinator/etcd/write_batches.h"

#include "absl/strings/str_cat.h"

namespace herd::coordinator {

absl::StatusOr<std::vector<std::vector<KeyValue>>> SplitIntoTxns(std::vector<KeyValue> puts, const TxnLimits& limits) {
  std::vector<std::vector<KeyValue>> batches;
  size_t bytes = 0;
  for (KeyValue& put : puts) {
    const size_t size = put.key.size() + put.value.size();
    if (size > limits.max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("etcd: the record at ", put.key, " is ", size,
                                                       " bytes, over the ", limits.max_bytes,
                                                       " one etcd transaction may carry"));
    }
    if (batches.empty() || batches.back().size() >= limits.max_ops || bytes + size > limits.max_bytes) {
      batches.emplace_back();
      bytes = 0;
    }
    bytes += size;
    batches.back().push_back(std::move(put));
  }
  return batches;
}

}  // namespace herd::coordinator
