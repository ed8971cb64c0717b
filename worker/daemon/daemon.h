// The worker daemon's control loop: register with the coordinator, heartbeat,
// and keep the trainer processes in line with the assignments it returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/leader_channel.h"
#include "proto/herd.grpc.pb.h"
#include "worker/daemon/backoff.h"
#include "worker/daemon/trainer_supervisor.h"
#include "worker/daemon/unrecorded_checkpoints.h"
#include "worker/daemon/worker_metrics.h"

namespace herd::worker {

struct DaemonOptions {
  std::string worker_id;
  std::string address;  // host peers use to reach this worker's trainers
  std::string device_kind = "cpu";
  int64_t device_count = 1;
  std::map<std::string, std::string> labels;  // --label, sent with every registration
  std::string token;  // bearer token; empty when auth is off
  std::chrono::milliseconds rpc_timeout{5000};
  std::chrono::milliseconds min_backoff{200};
  std::chrono::milliseconds max_backoff{5000};
  std::chrono::milliseconds reap_interval{100};
  // Used when the coordinator's register response names no interval.
  std::chrono::milliseconds default_heartbeat_interval{1000};
  std::string ready_file;       // written after the first registration; "" for none
  std::string metrics_address;  // host:port the ready file advertises
  // Told whenever registration with the coordinator starts or ends (the
  // health service's status); may be empty.
  std::function<void(bool registered)> on_registered;
  // How long Drain() waits for the trainers to leave before stopping them.
  std::chrono::milliseconds drain_timeout{50000};
  // This process's incarnation (common/incarnation.h); empty: a fresh
  // random one (NewIncarnation). Tests pass their own.
  std::string incarnation;
  // The trainers' checkpoint storage: the daemon removes what the
  // coordinator refuses or retires among the records it delivers for them.
  std::string checkpoint_root;
};

class Daemon {
 public:
  // `supervisor` and `metrics` must outlive the daemon.
  // `coordinator`: the coordinator's addresses (the leader among them is called).
  Daemon(DaemonOptions options, std::shared_ptr<LeaderChannel> coordinator, TrainerSupervisor* supervisor,
         WorkerMetrics* metrics);
  ~Daemon();

  // Runs until Stop() or a finished Drain(), then stops every trainer and
  // reports their exits in a last best-effort heartbeat. Trainers keep
  // running while the coordinator is unreachable: the data path does not
  // need it. Returns false when a drain ran out of time (trainers stopped).
  bool Run();

  // Thread-safe; Run() returns soon after.
  void Stop();

  // Thread-safe. Heartbeats say this worker drains: the coordinator gives it
  // no new job and asks each job it runs to release it at the next step
  // boundary. Run() returns once no trainer runs and every exit was
  // reported, or after drain_timeout.
  void Drain();

 private:
  enum class HeartbeatOutcome { kOk, kReregister };

  absl::Status Register();
  void SetRegistered(bool registered);
  absl::StatusOr<HeartbeatOutcome> Heartbeat(bool apply_assignments);
  // Waits up to `delay`; returns early when stopping (then false) or, with
  // `wake_on_exit`, when a trainer exited (its exit should be reported now).
  bool WaitFor(std::chrono::milliseconds delay, bool wake_on_exit);
  // Runs one RPC with a fresh deadline-bound context on the leading
  // coordinator (following a follower's hint, or past an address that does
  // not answer, within one pass over the addresses; Run() backs off between
  // passes). With `cancel_on_stop`, Stop() cancels it, so a stop signal never
  // waits for a silent coordinator.
  using Rpc = std::function<grpc::Status(v1::ClusterService::StubInterface&, grpc::ClientContext*)>;
  grpc::Status Call(std::chrono::milliseconds timeout, bool cancel_on_stop, const Rpc& rpc);
  void ReapLoop();

  const DaemonOptions options_;
  std::shared_ptr<LeaderChannel> coordinator_;
  TrainerSupervisor* const supervisor_;
  WorkerMetrics* const metrics_;
  std::chrono::milliseconds heartbeat_interval_;
  // Sent with every registration of this process, so the coordinator tells
  // a restart (new value: the old trainers are gone) from a re-registration.
  const std::string incarnation_;
  // The coordinator's lease (0 until registered): retries while it is
  // unreachable stay well inside it, so a restarted coordinator hears from
  // its members before their leases run out.
  std::chrono::milliseconds lease_{0};
  std::chrono::milliseconds RetryDelay(Backoff& backoff) const;
  bool ready_file_written_ = false;
  // Touched by the heartbeat only (Run's thread).
  UnrecordedCheckpoints unrecorded_checkpoints_;
  std::thread reap_thread_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point drain_deadline_ ABSL_GUARDED_BY(mu_);
  // Whether a drain is under way, and whether it has ended (done or timed out).
  bool Draining();
  bool DrainOver(bool* timed_out);
  bool trainer_exited_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace herd::worker
