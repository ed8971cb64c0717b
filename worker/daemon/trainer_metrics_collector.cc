#include "worker/daemon/trainer_metrics_collector.h"

#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "worker/contract/trainer_contract.h"
#include "worker/train/report/metrics_snapshot.h"

namespace herd::worker {
namespace {

constexpr size_t kMaxExitedSnapshots = 64;

std::vector<prometheus::MetricFamily> ReadSnapshot(const std::string& job_dir) {
  auto families = ReadMetricsSnapshot(MetricsSnapshotPath(job_dir));
  if (families.ok()) return *std::move(families);
  // NotFound: the trainer has not written one yet (or never will).
  if (!absl::IsNotFound(families.status())) {
    LOG_EVERY_N(WARNING, 100) << families.status();
  }
  return {};
}

}  // namespace

void MergeMetricFamilies(std::vector<prometheus::MetricFamily> from, std::vector<prometheus::MetricFamily>* into) {
  for (prometheus::MetricFamily& family : from) {
    auto same_name = [&](const prometheus::MetricFamily& f) { return f.name == family.name; };
    auto existing = std::find_if(into->begin(), into->end(), same_name);
    if (existing == into->end()) {
      into->push_back(std::move(family));
      continue;
    }
    if (existing->type != family.type) {
      LOG_EVERY_N(WARNING, 100) << "trainer metric " << family.name << " has two types; keeping the first";
      continue;
    }
    // Two series with one label set would make the exposition invalid.
    std::set<std::vector<prometheus::ClientMetric::Label>> seen;
    for (const auto& metric : existing->metric) seen.insert(metric.label);
    for (prometheus::ClientMetric& metric : family.metric) {
      if (seen.insert(metric.label).second) existing->metric.push_back(std::move(metric));
    }
  }
}

void TrainerMetricsCollector::TrainerStarting(const std::string& job_id, const std::string& job_dir) {
  std::error_code error;
  std::filesystem::remove(MetricsSnapshotPath(job_dir), error);
  absl::MutexLock lock(&mu_);
  job_dirs_[job_id] = job_dir;
}

void TrainerMetricsCollector::TrainerExited(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = job_dirs_.find(job_id);
  if (it == job_dirs_.end()) return;
  // Read now: the job's next trainer will reuse the folder.
  std::vector<prometheus::MetricFamily> last = ReadSnapshot(it->second);
  // Bounded, in case nothing scrapes this daemon for a long time.
  if (exited_.size() >= kMaxExitedSnapshots) exited_.erase(exited_.begin());
  if (!last.empty()) exited_.push_back(std::move(last));
  job_dirs_.erase(it);
}

std::vector<prometheus::MetricFamily> TrainerMetricsCollector::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  absl::MutexLock lock(&mu_);
  // Running trainers first: their series win over an exited trainer's.
  for (const auto& [job_id, job_dir] : job_dirs_) MergeMetricFamilies(ReadSnapshot(job_dir), &families);
  for (auto& last : exited_) MergeMetricFamilies(std::move(last), &families);
  exited_.clear();
  return families;
}

}  // namespace herd::worker
