#include "coordinator/job_watchers.h"

#include <utility>
#include <vector>

namespace herd::coordinator {

JobWatchers::WatchId JobWatchers::Add(const std::string& job_id, std::shared_ptr<JobWatcher> watcher) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return 0;
  const WatchId id = next_id_++;
  watches_[id] = Watch{job_id, std::move(watcher)};
  by_job_.emplace(job_id, id);
  return id;
}

void JobWatchers::Remove(WatchId id) {
  absl::MutexLock lock(&mu_);
  auto watch = watches_.find(id);
  if (watch == watches_.end()) return;
  auto [first, last] = by_job_.equal_range(watch->second.job_id);
  for (auto it = first; it != last; ++it) {
    if (it->second == id) {
      by_job_.erase(it);
      break;
    }
  }
  watches_.erase(watch);
}

bool JobWatchers::Watched(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return by_job_.count(job_id) > 0;
}

void JobWatchers::Deliver(const std::map<std::string, JobSnapshot>& changes) {
  if (changes.empty()) return;
  std::vector<std::pair<std::shared_ptr<JobWatcher>, const JobSnapshot*>> due;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [job_id, snapshot] : changes) {
      auto [first, last] = by_job_.equal_range(job_id);
      for (auto it = first; it != last; ++it) due.emplace_back(watches_.at(it->second).watcher, &snapshot);
    }
  }
  for (const auto& [watcher, snapshot] : due) watcher->Changed(*snapshot);
}

bool JobWatchers::AwaitCount(size_t count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return watches_.size() == count; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

void JobWatchers::Shutdown(const absl::Status& status) {
  std::map<WatchId, Watch> ended;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    ended.swap(watches_);
    by_job_.clear();
  }
  for (auto& [id, watch] : ended) watch.watcher->End(status);
}

}  // namespace herd::coordinator
