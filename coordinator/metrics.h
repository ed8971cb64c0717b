// The coordinator's Prometheus metrics. Families are built once at start-up;
// per-label series are created on first use and cached, so the RPC path does
// one map lookup under a small mutex and no registry work.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <tuple>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

// The streams herd_coordinator_open_streams counts, its `kind` label:
// daemons' WatchLogRequests, WatchJob, GetJobLogs, FetchModelFile, UploadLog.
enum class StreamKind { kLogRequests, kJobWatch, kJobLogs, kModelFetch, kLogUpload };

class Metrics {
 public:
  explicit Metrics(prometheus::Registry& registry);

  // One open stream in herd_coordinator_open_streams, from its making until
  // Close or its end, whichever comes first.
  class OpenStreamCount {
   public:
    explicit OpenStreamCount(prometheus::Gauge* gauge) : gauge_(gauge) { gauge_->Increment(); }
    OpenStreamCount(OpenStreamCount&& other) noexcept : gauge_(std::exchange(other.gauge_, nullptr)) {}
    ~OpenStreamCount() { Close(); }
    void Close() {
      if (gauge_ != nullptr) std::exchange(gauge_, nullptr)->Decrement();
    }

   private:
    prometheus::Gauge* gauge_;
  };
  // Counts a stream of `kind` as open until the result is closed or goes.
  OpenStreamCount CountOpenStream(StreamKind kind) { return OpenStreamCount(open_streams_.at(kind)); }

  // Number of jobs in each state; states missing from `counts` read 0.
  void SetJobCounts(const std::map<v1::JobState, int64_t>& counts);
  void SetWorkersAlive(int64_t count);
  // One constant-1 series of herd_coordinator_worker_labels per live worker
  // (worker id -> its --label labels): {worker, label_KEY=VALUE...}. A
  // worker gone or relabelled loses its old series.
  void SetWorkerLabels(const std::map<std::string, std::map<std::string, std::string>>& labels_by_worker);
  void CountGenerationStarted(const std::string& reason);
  // A job the scheduler shrank or suspended for a higher-priority one, by kind.
  void CountPreemption(const std::string& kind);
  void ObserveRendezvousSeconds(double seconds);
  void CountRpc(const std::string& method, absl::StatusCode code);
  void CountCheckpointRecorded();
  void CountHeartbeat();
  // A job was asked to release a worker at its next step boundary (release.h).
  void CountReleaseRequested(const std::string& reason);
  // Mutating and refused calls (see RpcEdge::Audit), by event, principal
  // ("" when unauthenticated) and status code.
  void CountAuditEvent(const std::string& event, const std::string& principal, absl::StatusCode code);
  // Bytes (keys plus values) the rendezvous KV store holds.
  void SetKvBytes(int64_t bytes);
  // A write of one record (job, worker, checkpoint) to the state database
  // failed; it is retried.
  void CountStateWriteFailure(const std::string& record);
  // Jobs whose newest state is only in memory after a failed write.
  void SetJobsUnsaved(int64_t count);

 private:
  prometheus::Family<prometheus::Gauge>& jobs_;
  std::map<v1::JobState, prometheus::Gauge*> jobs_by_state_;
  prometheus::Gauge& workers_alive_;
  prometheus::Family<prometheus::Gauge>& worker_labels_;
  prometheus::Family<prometheus::Counter>& generations_started_;
  prometheus::Family<prometheus::Counter>& preemptions_;
  prometheus::Histogram& rendezvous_duration_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Counter& checkpoints_recorded_;
  prometheus::Counter& heartbeats_;
  prometheus::Family<prometheus::Counter>& releases_requested_;
  prometheus::Family<prometheus::Counter>& audit_events_;
  prometheus::Gauge& kv_bytes_;
  prometheus::Family<prometheus::Counter>& state_write_failures_;
  prometheus::Gauge& jobs_unsaved_;
  std::map<StreamKind, prometheus::Gauge*> open_streams_;

  absl::Mutex mu_;
  std::map<std::string, prometheus::Counter*> generations_by_reason_ ABSL_GUARDED_BY(mu_);
  // Worker id -> the labels its series carries, and the series.
  std::map<std::string, std::pair<std::map<std::string, std::string>, prometheus::Gauge*>> worker_label_series_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> preemptions_by_kind_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> releases_by_reason_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> write_failures_by_record_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, absl::StatusCode>, prometheus::Counter*> rpcs_by_label_ ABSL_GUARDED_BY(mu_);
  std::map<std::tuple<std::string, std::string, absl::StatusCode>, prometheus::Counter*> audit_by_label_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace herd::coordinator
