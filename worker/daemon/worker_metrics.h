// The daemon's Prometheus metrics. Families are registered once, here.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <string>

namespace herd::worker {

class WorkerMetrics {
 public:
  WorkerMetrics(prometheus::Registry& registry, const std::string& worker_id, const std::string& device);

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
