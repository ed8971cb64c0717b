#include "coordinator/island_members.h"

#include <algorithm>
#include <map>
#include <set>

namespace herd::coordinator {
namespace {

bool Contains(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

std::string IslandOfWorker(const ClusterState& state, const std::string& key, const std::string& worker_id) {
  auto worker = state.workers.find(worker_id);
  if (worker == state.workers.end()) return "";
  auto label = worker->second.labels.find(key);
  return label == worker->second.labels.end() ? "" : label->second;
}

std::vector<std::string> ChooseMembers(const ClusterState& state, const v1::JobSpec& spec,
                                       const std::vector<std::string>& survivors,
                                       const std::vector<std::string>& joiners, int64_t limit) {
  const std::string& key = spec.sync().islands_by();
  const int64_t minimum = spec.sync().min_workers_per_island();
  if (key.empty() || minimum <= 1) {
    std::vector<std::string> chosen = survivors;
    for (const std::string& id : joiners) {
      if (static_cast<int64_t>(chosen.size()) >= limit) break;
      chosen.push_back(id);
    }
    return chosen;
  }
  // Each island's candidates, survivors first, and the islands in the order
  // their first candidate appears.
  struct Island {
    std::vector<std::string> survivors;
    std::vector<std::string> joiners;
  };
  std::map<std::string, Island> islands;
  std::vector<std::string> order;
  const auto add = [&](const std::string& id, bool survivor) {
    const std::string island = IslandOfWorker(state, key, id);
    if (!islands.count(island)) order.push_back(island);
    (survivor ? islands[island].survivors : islands[island].joiners).push_back(id);
  };
  for (const std::string& id : survivors) add(id, true);
  for (const std::string& id : joiners) add(id, false);

  std::set<std::string> taken;
  int64_t room = limit;
  // Islands whose survivors alone reach the minimum stay, whatever the limit.
  std::vector<std::string> kept;
  for (const std::string& name : order) {
    const Island& island = islands[name];
    if (static_cast<int64_t>(island.survivors.size()) < minimum) continue;
    taken.insert(island.survivors.begin(), island.survivors.end());
    room -= static_cast<int64_t>(island.survivors.size());
    kept.push_back(name);
  }
  // The others need joiners to reach it, while the limit leaves room.
  for (const std::string& name : order) {
    if (Contains(kept, name)) continue;
    const Island& island = islands[name];
    const int64_t have = static_cast<int64_t>(island.survivors.size());
    const int64_t need = minimum - have;
    if (have + static_cast<int64_t>(island.joiners.size()) < minimum || need > room) continue;
    taken.insert(island.survivors.begin(), island.survivors.end());
    taken.insert(island.joiners.begin(), island.joiners.begin() + need);
    room -= minimum;
    kept.push_back(name);
  }
  // What room is left goes to the chosen islands' other joiners, in order.
  for (const std::string& id : joiners) {
    if (room <= 0) break;
    if (taken.count(id) || !Contains(kept, IslandOfWorker(state, key, id))) continue;
    taken.insert(id);
    --room;
  }
  std::vector<std::string> chosen;
  for (const std::string& id : survivors) {
    if (taken.count(id)) chosen.push_back(id);
  }
  for (const std::string& id : joiners) {
    if (taken.count(id)) chosen.push_back(id);
  }
  return chosen;
}

std::map<std::string, int64_t> IslandsSittingOut(const ClusterState& state, const v1::JobSpec& spec,
                                                 const std::vector<std::string>& candidates,
                                                 const std::vector<std::string>& chosen) {
  const std::string& key = spec.sync().islands_by();
  std::map<std::string, int64_t> out;
  if (key.empty()) return out;
  std::set<std::string> chosen_islands;
  for (const std::string& id : chosen) chosen_islands.insert(IslandOfWorker(state, key, id));
  for (const std::string& id : candidates) {
    const std::string island = IslandOfWorker(state, key, id);
    if (!chosen_islands.count(island)) ++out[island];
  }
  return out;
}

}  // namespace herd::coordinator
