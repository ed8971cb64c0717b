// The daemon's Prometheus metrics. Families are registered once, here.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

namespace herd::worker {

class WorkerMetrics {
 public:
  // `labels` (--label) join herd_worker_info as label_KEY (common/labels.h).
  WorkerMetrics(prometheus::Registry& registry, const std::string& worker_id, const std::string& device,
                const std::map<std::string, std::string>& labels = {});

  void SetTrainersRunning(size_t count);
  // Counts by code: "0", "1", ... or "signal_9" for a negative exit code.
  void RecordTrainerExit(int exit_code);
  void RecordHeartbeatFailure();
  void SetRegistered(bool registered);

  // The label value RecordTrainerExit uses.
  static std::string ExitCodeLabel(int exit_code);

 private:
  prometheus::Gauge& trainers_running_;
  prometheus::Family<prometheus::Counter>& trainer_exits_;
  prometheus::Counter& heartbeat_failures_;
  prometheus::Gauge& registered_;
};

}  // namespace herd::worker
