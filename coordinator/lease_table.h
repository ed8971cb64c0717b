// Heartbeats that only say "alive": recorded here, under a lock of their
// own (one of several shards), while the heartbeat holds the state lock
// only to read. The coordinator folds them into ClusterState
// (ApplyLeaseRenewals) at the start of every exclusive section, so each
// decision, lease expiry included, sees every heartbeat that came before it.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/cluster_state.h"

namespace herd::coordinator {

class LeaseTable {
 public:
  // Thread-safe: worker `worker_id` was heard at `now`.
  void Renew(const std::string& worker_id, double now);

  // Every renewal since the last call, the latest per worker; empties the
  // table.
  std::vector<LeaseRenewal> Take();

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    absl::Mutex mu;
    absl::flat_hash_map<std::string, double> heard ABSL_GUARDED_BY(mu);
  };
  std::array<Shard, kShards> shards_;
};

}  // namespace herd::coordinator
