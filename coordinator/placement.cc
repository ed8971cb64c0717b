#include "coordinator/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace herd::coordinator {

bool HasPlacement(const v1::JobSpec& spec) {
  return !spec.placement().require().empty() || !spec.sync().islands_by().empty();
}

bool FitsPlacement(const WorkerLabels& labels, const v1::JobSpec& spec) {
  for (const auto& [key, value] : spec.placement().require()) {
    auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  const std::string& islands_by = spec.sync().islands_by();
  return islands_by.empty() || labels.count(islands_by) > 0;
}

std::string PlacementText(const v1::JobSpec& spec) {
  std::vector<std::string> parts;
  if (!spec.placement().require().empty()) {
    // The proto map has no order: sort, so the text is stable.
    const WorkerLabels require(spec.placement().require().begin(), spec.placement().require().end());
    parts.push_back(absl::StrCat("placement.require ", absl::StrJoin(require, ",", absl::PairFormatter("="))));
  }
  if (!spec.sync().islands_by().empty()) parts.push_back(absl::StrCat("sync.islands_by ", spec.sync().islands_by()));
  return absl::StrJoin(parts, ", ");
}

std::vector<std::string> OrderedByIsland(const std::vector<std::string>& members,
                                         const std::map<std::string, WorkerLabels>& labels_of,
                                         const v1::JobSpec& spec) {
  const std::string& key = spec.sync().islands_by();
  if (key.empty()) return members;
  const auto island = [&](const std::string& id) -> std::string {
    auto worker = labels_of.find(id);
    if (worker == labels_of.end()) return "";
    auto label = worker->second.find(key);
    return label == worker->second.end() ? "" : label->second;
  };
  std::vector<std::string> ordered = members;
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const std::string& a, const std::string& b) { return island(a) < island(b); });
  return ordered;
}

}  // namespace herd::coordinator
