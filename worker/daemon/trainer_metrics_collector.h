// Exposes the trainers' metrics on the daemon's /metrics, so one scrape
// target per worker carries them all. Each trainer keeps its own registry and
// writes it to <job dir>/metrics.snapshot every second; at scrape time this
// collectable reads the snapshots of the running trainers, plus the last one
// of each trainer that exited since the previous scrape (so its final
// figures are scraped once), and merges families of the same name.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace herd::worker {

class TrainerMetricsCollector : public prometheus::Collectable {
 public:
  // A trainer is about to start in `job_dir`: a snapshot left there by an
  // earlier trainer of the job is removed, so it is never served as this one's.
  void TrainerStarting(const std::string& job_id, const std::string& job_dir);
  // The job's trainer exited: its last snapshot is served by the next scrape.
  void TrainerExited(const std::string& job_id);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> job_dirs_ ABSL_GUARDED_BY(mu_);
  // Collect() is const for prometheus-cpp, yet serving these consumes them.
  mutable std::vector<std::vector<prometheus::MetricFamily>> exited_ ABSL_GUARDED_BY(mu_);
};

// Appends `from` to `into`: a family already there gets the new series, except
// those whose label set it already has (earlier sources win), and is skipped
// altogether when its type differs. Exposed for tests.
void MergeMetricFamilies(std::vector<prometheus::MetricFamily> from, std::vector<prometheus::MetricFamily>* into);

}  // namespace herd::worker
