#include "coordinator/state_store.h"

namespace herd::coordinator {

StateWrite Snapshot(const ClusterState& state, const ChangeSet& changes) {
  StateWrite records;
  for (const std::string& id : changes.jobs) {
    auto it = state.jobs.find(id);
    if (it != state.jobs.end()) records.jobs.push_back(it->second);
  }
  for (const std::string& id : changes.workers) {
    auto it = state.workers.find(id);
    if (it != state.workers.end()) records.workers.push_back(it->second);
  }
  return records;
}

}  // namespace herd::coordinator
