#include "worker/daemon/worker_metrics.h"

#include "absl/strings/str_cat.h"
#include "common/labels.h"

namespace herd::worker {

namespace {

// herd_worker_info's labels: the worker, its device kind and its --label ones.
std::map<std::string, std::string> InfoLabels(const std::string& worker_id, const std::string& device,
                                              const std::map<std::string, std::string>& labels) {
  std::map<std::string, std::string> info = {{"worker", worker_id}, {"device", device}};
  for (const auto& [key, value] : labels) info[MetricLabelName(key)] = value;
  return info;
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry, const std::string& worker_id,
                             const std::string& device, const std::map<std::string, std::string>& labels)
    : trainers_running_(prometheus::BuildGauge()
                            .Name("herd_worker_trainers_running")
                            .Help("Trainer processes this worker daemon is running now.")
                            .Register(registry)
                            .Add({})),
      trainer_exits_(prometheus::BuildCounter()
                         .Name("herd_worker_trainer_exits_total")
                         .Help("Trainer process exits, by exit code (signal_N when killed by signal N).")
                         .Register(registry)),
      heartbeat_failures_(prometheus::BuildCounter()
                              .Name("herd_worker_heartbeat_failures_total")
                              .Help("Heartbeats to the coordinator that failed.")
                              .Register(registry)
                              .Add({})),
      registered_(prometheus::BuildGauge()
                      .Name("herd_worker_registered")
                      .Help("1 while the worker is registered with the coordinator, else 0.")
                      .Register(registry)
                      .Add({})) {
  prometheus::BuildGauge()
      .Name("herd_worker_info")
      .Help("Constant 1, labelled with this worker's id, device kind and --label labels (label_KEY).")
      .Register(registry)
      .Add(InfoLabels(worker_id, device, labels))
      .Set(1);
}

std::string WorkerMetrics::ExitCodeLabel(int exit_code) {
  if (exit_code < 0) return absl::StrCat("signal_", -exit_code);
  return absl::StrCat(exit_code);
}

void WorkerMetrics::SetTrainersRunning(size_t count) { trainers_running_.Set(static_cast<double>(count)); }

void WorkerMetrics::RecordTrainerExit(int exit_code) {
  trainer_exits_.Add({{"code", ExitCodeLabel(exit_code)}}).Increment();
}

void WorkerMetrics::RecordHeartbeatFailure() { heartbeat_failures_.Increment(); }

void WorkerMetrics::SetRegistered(bool registered) { registered_.Set(registered ? 1 : 0); }

}  // namespace herd::worker
