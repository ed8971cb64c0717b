#include "worker/train/sync/island_layout.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace herd {

absl::StatusOr<IslandLayout> LayoutIslands(const google::protobuf::RepeatedPtrField<v1::Peer>& peers,
                                           const std::string& key, int rank) {
  const int n = peers.size();
  if (rank < 0 || rank >= n) {
    return absl::InvalidArgumentError(absl::StrCat("sync.islands_by: rank ", rank, " is not among the ", n, " peers"));
  }
  std::map<std::string, std::vector<int>> by_value;  // ordered: islands sorted by value
  for (int r = 0; r < n; ++r) {
    const v1::Peer& peer = peers.Get(r);
    if (peer.rank() != r) {
      return absl::InvalidArgumentError(
          absl::StrCat("sync.islands_by: peer ", r, " carries rank ", peer.rank(), "; peers must be in rank order"));
    }
    auto it = peer.labels().find(key);
    if (it == peer.labels().end()) {
      return absl::InvalidArgumentError(absl::StrCat("sync.islands_by ", key, ": rank ", r, " (worker ",
                                                     peer.worker_id(), ") has no label ", key));
    }
    by_value[it->second].push_back(r);
  }
  IslandLayout layout;
  layout.island_of.assign(static_cast<size_t>(n), 0);
  layout.shards = n;
  for (auto& [value, ranks] : by_value) {
    const int island = static_cast<int>(layout.values.size());
    for (int r : ranks) layout.island_of[static_cast<size_t>(r)] = island;
    layout.shards = std::min(layout.shards, static_cast<int>(ranks.size()));
    layout.values.push_back(value);
    layout.ranks.push_back(std::move(ranks));
  }
  layout.island = layout.island_of[static_cast<size_t>(rank)];
  const std::vector<int>& mine = layout.my_island();
  layout.position = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  if (layout.owns_shard()) {
    for (const auto& ranks : layout.ranks) layout.cross.push_back(ranks[static_cast<size_t>(layout.position)]);
  }
  return layout;
}

std::vector<std::vector<int>> AssignShards(const std::vector<int64_t>& tensor_bytes, int shards) {
  std::vector<std::vector<int>> assigned(static_cast<size_t>(std::max(shards, 0)));
  if (assigned.empty()) return assigned;
  std::vector<int> order(tensor_bytes.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; equal sizes in index order: deterministic everywhere.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return tensor_bytes[a] > tensor_bytes[b]; });
  std::vector<int64_t> load(assigned.size(), 0);
  for (int t : order) {
    const size_t lightest = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    assigned[lightest].push_back(t);
    load[lightest] += tensor_bytes[static_cast<size_t>(t)];
  }
  for (auto& shard : assigned) std::sort(shard.begin(), shard.end());
  // Empty shards last: a shard's index is its owner's position, and only
  // positions below the count of non-empty shards average anything.
  std::stable_partition(assigned.begin(), assigned.end(), [](const std::vector<int>& s) { return !s.empty(); });
  return assigned;
}

}  // namespace herd
