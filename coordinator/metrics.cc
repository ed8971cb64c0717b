#include "coordinator/metrics.h"

#include "absl/strings/ascii.h"
#include "common/labels.h"

namespace herd::coordinator {
namespace {

// Rendezvous waits range from instant (the job already runs) to the KV cap.
const prometheus::Histogram::BucketBoundaries& RendezvousBuckets() {
  static const auto* buckets =
      new prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  return *buckets;
}

}  // namespace

Metrics::Metrics(prometheus::Registry& registry)
    : jobs_(prometheus::BuildGauge()
                .Name("herd_coordinator_jobs")
                .Help("Jobs known to the coordinator, by state")
                .Register(registry)),
      workers_alive_(prometheus::BuildGauge()
                         .Name("herd_coordinator_workers_alive")
                         .Help("Registered workers whose lease has not expired")
                         .Register(registry)
                         .Add({})),
      worker_labels_(prometheus::BuildGauge()
                         .Name("herd_coordinator_worker_labels")
                         .Help("Constant 1 per live worker, labelled with its id and its --label labels as label_KEY")
                         .Register(registry)),
      generations_started_(prometheus::BuildCounter()
                               .Name("herd_coordinator_generations_started_total")
                               .Help("Job generations started, by reason")
                               .Register(registry)),
      preemptions_(prometheus::BuildCounter()
                       .Name("herd_coordinator_preemptions_total")
                       .Help("Running jobs shrunk or suspended for a higher-priority job, by kind (shrink, suspend)")
                       .Register(registry)),
      rendezvous_duration_(prometheus::BuildHistogram()
                               .Name("herd_coordinator_rendezvous_duration_seconds")
                               .Help("Time JoinGeneration waited for the job's generation to form")
                               .Register(registry)
                               .Add({}, RendezvousBuckets())),
      rpcs_(prometheus::BuildCounter()
                .Name("herd_coordinator_rpcs_total")
                .Help("RPCs handled by the coordinator, by method and status code")
                .Register(registry)),
      checkpoints_recorded_(prometheus::BuildCounter()
                                .Name("herd_coordinator_checkpoints_recorded_total")
                                .Help("Checkpoints committed to the catalog")
                                .Register(registry)
                                .Add({})),
      heartbeats_(prometheus::BuildCounter()
                      .Name("herd_coordinator_heartbeats_total")
                      .Help("Worker heartbeats received")
                      .Register(registry)
                      .Add({})),
      releases_requested_(prometheus::BuildCounter()
                              .Name("herd_coordinator_releases_requested_total")
                              .Help("Workers asked to leave a running job at its next step boundary, by reason "
                                    "(drain, shrink)")
                              .Register(registry)),
      audit_events_(prometheus::BuildCounter()
                        .Name("herd_coordinator_audit_events_total")
                        .Help("Audited calls (submit, cancel, register, unauthenticated, permission_denied), by "
                              "event, principal and status code")
                        .Register(registry)),
      kv_bytes_(prometheus::BuildGauge()
                    .Name("herd_coordinator_kv_bytes")
                    .Help("Bytes (keys plus values) held by the rendezvous key-value store")
                    .Register(registry)
                    .Add({})),
      state_write_failures_(prometheus::BuildCounter()
                                .Name("herd_coordinator_state_write_failures_total")
                                .Help("Failed writes to the coordinator's state database, by record (job, worker, "
                                      "checkpoint); each is retried")
                                .Register(registry)),
      jobs_unsaved_(prometheus::BuildGauge()
                        .Name("herd_coordinator_jobs_unsaved")
                        .Help("Jobs whose newest state is only in the coordinator's memory after a failed write")
                        .Register(registry)
                        .Add({})) {
  for (v1::JobState state : {v1::PENDING, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    jobs_by_state_[state] = &jobs_.Add({{"state", absl::AsciiStrToLower(v1::JobState_Name(state))}});
  }
  auto& open_streams = prometheus::BuildGauge()
                           .Name("herd_coordinator_open_streams")
                           .Help("Streams open on the coordinator, by kind (log_requests, job_watch, job_logs, "
                                 "model_fetch, log_upload)")
                           .Register(registry);
  for (const auto& [kind, name] : std::map<StreamKind, const char*>{{StreamKind::kLogRequests, "log_requests"},
                                                                    {StreamKind::kJobWatch, "job_watch"},
                                                                    {StreamKind::kJobLogs, "job_logs"},
                                                                    {StreamKind::kModelFetch, "model_fetch"},
                                                                    {StreamKind::kLogUpload, "log_upload"}}) {
    open_streams_[kind] = &open_streams.Add({{"kind", name}});
  }
}

void Metrics::SetJobCounts(const std::map<v1::JobState, int64_t>& counts) {
  for (auto& [state, gauge] : jobs_by_state_) {
    auto it = counts.find(state);
    gauge->Set(it == counts.end() ? 0 : static_cast<double>(it->second));
  }
}

void Metrics::SetWorkersAlive(int64_t count) { workers_alive_.Set(static_cast<double>(count)); }

void Metrics::SetWorkerLabels(const std::map<std::string, std::map<std::string, std::string>>& labels_by_worker) {
  absl::MutexLock lock(&mu_);
  for (auto it = worker_label_series_.begin(); it != worker_label_series_.end();) {
    auto now = labels_by_worker.find(it->first);
    if (now != labels_by_worker.end() && now->second == it->second.first) {
      ++it;
      continue;
    }
    worker_labels_.Remove(it->second.second);
    it = worker_label_series_.erase(it);
  }
  for (const auto& [worker, labels] : labels_by_worker) {
    if (worker_label_series_.count(worker)) continue;
    std::map<std::string, std::string> series = {{"worker", worker}};
    for (const auto& [key, value] : labels) series[MetricLabelName(key)] = value;
    prometheus::Gauge& gauge = worker_labels_.Add(series);
    gauge.Set(1);
    worker_label_series_[worker] = {labels, &gauge};
  }
}

void Metrics::CountPreemption(const std::string& kind) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& counter = preemptions_by_kind_[kind];
  if (counter == nullptr) counter = &preemptions_.Add({{"kind", kind}});
  counter->Increment();
}

void Metrics::CountGenerationStarted(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& counter = generations_by_reason_[reason];
  if (counter == nullptr) counter = &generations_started_.Add({{"reason", reason}});
  counter->Increment();
}

void Metrics::ObserveRendezvousSeconds(double seconds) { rendezvous_duration_.Observe(seconds); }

void Metrics::CountRpc(const std::string& method, absl::StatusCode code) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& counter = rpcs_by_label_[{method, code}];
  if (counter == nullptr) counter = &rpcs_.Add({{"method", method}, {"code", absl::StatusCodeToString(code)}});
  counter->Increment();
}

void Metrics::CountCheckpointRecorded() { checkpoints_recorded_.Increment(); }

void Metrics::CountHeartbeat() { heartbeats_.Increment(); }

void Metrics::CountReleaseRequested(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& counter = releases_by_reason_[reason];
  if (counter == nullptr) counter = &releases_requested_.Add({{"reason", reason}});
  counter->Increment();
}

}  // namespace herd::coordinator

namespace herd::coordinator {

void Metrics::CountAuditEvent(const std::string& event, const std::string& principal, absl::StatusCode code) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& counter = audit_by_label_[{event, principal, code}];
  if (counter == nullptr) {
    counter = &audit_events_.Add(
        {{"event", event}, {"principal", principal}, {"code", absl::StatusCodeToString(code)}});
  }
  counter->Increment();
}

void Metrics::SetKvBytes(int64_t bytes) { kv_bytes_.Set(static_cast<double>(bytes)); }

void Metrics::CountStateWriteFailure(const std::string& record) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& counter = write_failures_by_record_[record];
  if (counter == nullptr) counter = &state_write_failures_.Add({{"record", record}});
  counter->Increment();
}

void Metrics::SetJobsUnsaved(int64_t count) { jobs_unsaved_.Set(static_cast<double>(count)); }

}  // namespace herd::coordinator
