#include "worker/daemon/daemon.h"

#include <glog/logging.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/incarnation.h"
#include "common/rpc_options.h"
#include "common/status_convert.h"
#include "worker/daemon/backoff.h"
#include "worker/daemon/identifiers.h"
#include "worker/daemon/ready_file.h"

namespace herd::worker {
namespace {

// Bounds on the coordinator's heartbeat interval, so a bad value neither
// spins nor lets the lease lapse.
constexpr std::chrono::milliseconds kMinHeartbeatInterval{10};
constexpr std::chrono::milliseconds kMaxHeartbeatInterval{60000};
// The last heartbeat at shutdown must not hold the exit up for long.
constexpr std::chrono::milliseconds kFinalHeartbeatTimeout{1000};

std::string Seconds(std::chrono::milliseconds delay) { return absl::StrCat(delay.count() / 1000.0, "s"); }

}  // namespace

Daemon::Daemon(DaemonOptions options, std::shared_ptr<LeaderChannel> coordinator, TrainerSupervisor* supervisor,
               WorkerMetrics* metrics)
    : options_(std::move(options)),
      coordinator_(std::move(coordinator)),
      supervisor_(supervisor),
      metrics_(metrics),
      heartbeat_interval_(options_.default_heartbeat_interval),
      incarnation_(options_.incarnation.empty() ? NewIncarnation() : options_.incarnation),
      unrecorded_checkpoints_(options_.checkpoint_root) {
  SetRegistered(false);
}

void Daemon::SetRegistered(bool registered) {
  metrics_->SetRegistered(registered);
  if (options_.on_registered) options_.on_registered(registered);
}

Daemon::~Daemon() {
  Stop();
  if (reap_thread_.joinable()) reap_thread_.join();
}

void Daemon::Drain() {
  absl::MutexLock lock(&mu_);
  if (draining_) return;
  draining_ = true;
  drain_deadline_ = std::chrono::steady_clock::now() + options_.drain_timeout;
  trainer_exited_ = true;  // heartbeat now: the coordinator should hear it at once
}

bool Daemon::Draining() {
  absl::MutexLock lock(&mu_);
  return draining_;
}

bool Daemon::DrainOver(bool* timed_out) {
  {
    absl::MutexLock lock(&mu_);
    if (!draining_) return false;
    *timed_out = std::chrono::steady_clock::now() >= drain_deadline_;
  }
  return *timed_out || supervisor_->Drained();
}

void Daemon::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  if (in_flight_ != nullptr) in_flight_->TryCancel();
}

grpc::Status Daemon::Call(std::chrono::milliseconds timeout, bool cancel_on_stop, const Rpc& rpc) {
  auto new_context = [&] { return NewCallContext(options_.token, timeout); };
  return coordinator_->Call(new_context, [&](const std::shared_ptr<grpc::Channel>& channel,
                                             grpc::ClientContext* context) {
    if (cancel_on_stop) {
      absl::MutexLock lock(&mu_);
      if (stopping_) return grpc::Status(grpc::StatusCode::CANCELLED, "worker is stopping");
      in_flight_ = context;
    }
    auto stub = v1::ClusterService::NewStub(channel);
    grpc::Status status = rpc(*stub, context);
    if (cancel_on_stop) {
      absl::MutexLock lock(&mu_);
      in_flight_ = nullptr;
    }
    return status;
  });
}

bool Daemon::WaitFor(std::chrono::milliseconds delay, bool wake_on_exit) {
  absl::MutexLock lock(&mu_);
  auto wake = [this, wake_on_exit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || (wake_on_exit && trainer_exited_);
  };
  mu_.AwaitWithTimeout(absl::Condition(&wake), absl::FromChrono(delay));
  return !stopping_;
}

void Daemon::ReapLoop() {
  while (true) {
    int exited = supervisor_->Poll();
    absl::MutexLock lock(&mu_);
    if (exited > 0) trainer_exited_ = true;
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(options_.reap_interval))) return;
  }
}

absl::Status Daemon::Register() {
  v1::RegisterWorkerRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_address(options_.address);
  request.set_device_kind(options_.device_kind);
  request.set_device_count(options_.device_count);
  request.mutable_labels()->insert(options_.labels.begin(), options_.labels.end());
  v1::RegisterWorkerResponse response;
  absl::Status status =
      FromGrpcStatus(Call(options_.rpc_timeout, /*cancel_on_stop=*/true, [&](auto& stub, grpc::ClientContext* context) {
        context->AddMetadata(kIncarnationMetadataKey, incarnation_);
        return stub.RegisterWorker(context, request, &response);
      }));
  if (!status.ok()) return status;
  auto interval = std::chrono::milliseconds(static_cast<int64_t>(response.heartbeat_interval_seconds() * 1000));
  heartbeat_interval_ = interval.count() > 0 ? std::clamp(interval, kMinHeartbeatInterval, kMaxHeartbeatInterval)
                                             : options_.default_heartbeat_interval;
  lease_ = std::chrono::milliseconds(static_cast<int64_t>(response.lease_seconds() * 1000));
  LOG(INFO) << "registered as " << options_.worker_id << " (" << options_.device_kind << " x"
            << options_.device_count << ", address " << options_.address << ", incarnation " << incarnation_
            << "); heartbeat every "
            << Seconds(heartbeat_interval_) << ", lease " << response.lease_seconds() << "s";
  SetRegistered(true);
  if (!options_.ready_file.empty() && !ready_file_written_) {
    absl::Status written = WriteReadyFile(options_.ready_file, options_.worker_id, options_.metrics_address);
    if (!written.ok()) LOG(ERROR) << written;
    ready_file_written_ = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<Daemon::HeartbeatOutcome> Daemon::Heartbeat(bool apply_assignments) {
  {
    // Exits reaped from here on are not in this report: wake for them later.
    absl::MutexLock lock(&mu_);
    trainer_exited_ = false;
  }
  HeartbeatReport report = supervisor_->PrepareReport();
  auto timeout = apply_assignments ? options_.rpc_timeout : std::min(options_.rpc_timeout, kFinalHeartbeatTimeout);
  // Exited trainers' checkpoint records go before their exits, while their
  // generation is still the job's.
  unrecorded_checkpoints_.Add(report.unrecorded_checkpoints);
  unrecorded_checkpoints_.Deliver(
      [&](const v1::CommitCheckpointRequest& record) -> absl::StatusOr<v1::CommitCheckpointResponse> {
        v1::CommitCheckpointResponse response;
        absl::Status status =
            FromGrpcStatus(Call(timeout, /*cancel_on_stop=*/apply_assignments, [&](auto& stub, auto* context) {
              return stub.CommitCheckpoint(context, record, &response);
            }));
        if (!status.ok()) return status;
        return response;
      });
  v1::HeartbeatRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_draining(Draining());
  for (const std::string& job : report.running_jobs) request.add_running_jobs(job);
  for (const v1::TrainerExit& exit : report.exits) *request.add_exits() = exit;
  v1::HeartbeatResponse response;
  absl::Status status =
      FromGrpcStatus(Call(timeout, /*cancel_on_stop=*/apply_assignments, [&](auto& stub, grpc::ClientContext* context) {
        return stub.Heartbeat(context, request, &response);
      }));
  if (absl::IsNotFound(status)) return HeartbeatOutcome::kReregister;  // e.g. lease expired
  if (!status.ok()) {
    if (!absl::IsCancelled(status)) metrics_->RecordHeartbeatFailure();  // cancelled: we are stopping
    return status;
  }
  // The coordinator that asks us to register again ignored this report, so
  // its exits stay pending for the next heartbeat.
  if (response.reregister()) return HeartbeatOutcome::kReregister;
  if (apply_assignments) {
    std::vector<v1::Assignment> assignments(response.assignments().begin(), response.assignments().end());
    supervisor_->ApplyAssignments(report, assignments);
    supervisor_->AskToLeave(std::vector<v1::JobLeavers>(response.leavers().begin(), response.leavers().end()));
    supervisor_->ReformJobs(std::vector<v1::ReformRequest>(response.reform_jobs().begin(), response.reform_jobs().end()));
  }
  return HeartbeatOutcome::kOk;
}

std::chrono::milliseconds Daemon::RetryDelay(Backoff& backoff) const {
  return RetryDelayWithinLease(backoff.Next(), lease_, options_.min_backoff);
}

bool Daemon::Run() {
  reap_thread_ = std::thread(&Daemon::ReapLoop, this);
  Backoff backoff(options_.min_backoff, options_.max_backoff);
  bool registered = false;
  bool drain_timed_out = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    if (DrainOver(&drain_timed_out)) {
      if (drain_timed_out) {
        LOG(WARNING) << "drain: trainers still running after " << Seconds(options_.drain_timeout)
                     << " (--drain-timeout-seconds); stopping them";
      } else {
        LOG(INFO) << "drained: every trainer left its job and the coordinator heard it";
      }
      Stop();
      break;
    }
    if (!registered) {
      absl::Status status = Register();
      registered = status.ok();
      if (registered) continue;  // heartbeat at once: the coordinator may have work for us
      std::chrono::milliseconds delay = RetryDelay(backoff);
      LOG(WARNING) << "cannot register with the coordinator: " << status << "; retrying in " << Seconds(delay);
      WaitFor(delay, /*wake_on_exit=*/false);
      continue;
    }
    absl::StatusOr<HeartbeatOutcome> outcome = Heartbeat(/*apply_assignments=*/true);
    if (!outcome.ok()) {
      std::chrono::milliseconds delay = RetryDelay(backoff);
      LOG(WARNING) << "heartbeat failed: " << outcome.status() << "; trainers keep running; retrying in "
                   << Seconds(delay);
      WaitFor(delay, /*wake_on_exit=*/false);
    } else if (*outcome == HeartbeatOutcome::kReregister) {
      LOG(WARNING) << "the coordinator asked this worker to register again";
      registered = false;
      SetRegistered(false);
      // Only a good heartbeat resets the backoff, so a coordinator that keeps
      // asking cannot make us spin.
      WaitFor(backoff.Next(), /*wake_on_exit=*/false);
    } else {
      backoff.Reset();
      WaitFor(heartbeat_interval_, /*wake_on_exit=*/true);
    }
  }
  LOG(INFO) << "stopping: terminating trainers";
  if (reap_thread_.joinable()) reap_thread_.join();
  supervisor_->StopAll();
  if (registered) (void)Heartbeat(/*apply_assignments=*/false);
  SetRegistered(false);
  LOG(INFO) << "stopped";
  return !drain_timed_out;
}

}  // namespace herd::worker
