#include "coordinator/lease_table.h"

#include <algorithm>
#include <functional>

namespace herd::coordinator {

void LeaseTable::Renew(const std::string& worker_id, double now) {
  Shard& shard = shards_[std::hash<std::string>{}(worker_id) % kShards];
  absl::MutexLock lock(&shard.mu);
  double& heard = shard.heard[worker_id];
  heard = std::max(heard, now);
}

std::vector<LeaseRenewal> LeaseTable::Take() {
  std::vector<LeaseRenewal> renewals;
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [id, heard] : shard.heard) renewals.push_back({id, heard});
    shard.heard.clear();
  }
  return renewals;
}

}  // namespace herd::coordinator
