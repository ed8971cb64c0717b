// herd-worker: wires the flags to the daemon; the work happens in daemon.cc.
#include <glog/logging.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "common/auth.h"
#include "common/grpc_serving.h"
#include "common/rpc_options.h"
#include "proto/herd.grpc.pb.h"
#include "worker/daemon/daemon.h"
#include "worker/daemon/device_probe.h"
#include "worker/daemon/log_uplink.h"
#include "worker/daemon/ready_file.h"
#include "worker/daemon/trainer_metrics_collector.h"
#include "worker/daemon/trainer_supervisor.h"
#include "worker/daemon/worker_config.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/contract/trainer_contract.h"

namespace {

// herd.v1.WorkerService on the health port.
class WorkerStatusService final : public herd::v1::WorkerService::Service {
 public:
  WorkerStatusService(std::string worker_id, const std::atomic<bool>* registered,
                      herd::worker::TrainerSupervisor* supervisor)
      : worker_id_(std::move(worker_id)), registered_(registered), supervisor_(supervisor) {}
  grpc::Status GetWorkerStatus(grpc::ServerContext*, const herd::v1::GetWorkerStatusRequest*,
                               herd::v1::GetWorkerStatusResponse* response) override {
    response->set_worker_id(worker_id_);
    response->set_registered(registered_->load());
    for (const std::string& job : supervisor_->RunningJobs()) response->add_running_jobs(job);
    return grpc::Status::OK;
  }

 private:
  std::string worker_id_;
  const std::atomic<bool>* registered_;
  herd::worker::TrainerSupervisor* supervisor_;
};


std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "worker";
  return name;
}

std::chrono::milliseconds SecondsToMillis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  // Block the stop signals before any thread exists, so every thread inherits
  // the mask and only the waiter below receives them. Trainers get a clean
  // mask (see trainer_process.cc).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  using namespace herd::worker;
  int exit_code = 0;
  std::optional<WorkerConfig> config = ParseWorkerFlags(argc, argv, std::cout, std::cerr, &exit_code);
  if (!config.has_value()) return exit_code;
  std::error_code error;
  std::string self_path = std::filesystem::read_symlink("/proc/self/exe", error).string();
  if (absl::Status s = FinishWorkerConfig(&*config, HostName(), self_path); !s.ok()) {
    std::cerr << "herd-worker: " << s.message() << "\n";
    return 2;
  }
  if (config->device == "cuda") {
    auto visible = ProbeCudaDevices(config->trainer_binary);
    absl::Status offered =
        visible.ok() ? CheckOfferedGpus(config->device, config->gpu_indices, *visible, config->trainer_binary)
                     : visible.status();
    if (!offered.ok()) {
      std::cerr << "herd-worker: " << offered.message() << "\n";
      return 2;
    }
  }
  std::string token;
  if (!config->insecure_no_auth) {
    auto read = herd::ReadTokenFile(config->token_file);
    if (!read.ok()) {
      std::cerr << "herd-worker: --token-file: " << read.status().message() << "\n";
      return 2;
    }
    token = *read;
  }
  auto channel = herd::MakeChannel(config->coordinator, config->tls);
  if (!channel.ok()) {
    std::cerr << "herd-worker: " << channel.status().message() << "\n";
    return 2;
  }

  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  std::string metrics_address;
  if (!config->metrics_listen.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(config->metrics_listen);
    } catch (const std::exception& e) {
      std::cerr << "herd-worker: --metrics-listen " << config->metrics_listen << ": " << e.what() << "\n";
      return 1;
    }
    exposer->RegisterCollectable(registry);
    metrics_address = AdvertisedMetricsAddress(config->metrics_listen, exposer->GetListeningPorts().at(0));
    LOG(INFO) << "metrics on http://" << metrics_address << "/metrics";
  }
  WorkerMetrics metrics(*registry, config->worker_id, config->device);
  // The trainers' metrics join this daemon's at scrape time (one target per worker).
  auto trainer_metrics = std::make_shared<TrainerMetricsCollector>();
  if (exposer) exposer->RegisterCollectable(trainer_metrics);

  SupervisorOptions supervisor_options;
  supervisor_options.work_dir = config->work_dir;
  supervisor_options.command.trainer_binary = config->trainer_binary;
  supervisor_options.command.coordinator = config->coordinator;
  supervisor_options.command.worker_id = config->worker_id;
  supervisor_options.command.device = config->device;
  supervisor_options.command.token_file = config->token_file;
  supervisor_options.command.insecure_no_auth = config->insecure_no_auth;
  supervisor_options.command.tls = config->tls;
  supervisor_options.command.checkpoint_root = config->checkpoint_root;
  supervisor_options.gpus = config->gpu_indices;
  supervisor_options.kill_grace = SecondsToMillis(config->trainer_kill_grace_seconds);
  supervisor_options.stuck_after = SecondsToMillis(config->trainer_stuck_seconds);
  TrainerSupervisor supervisor(supervisor_options, &metrics, exposer ? trainer_metrics.get() : nullptr);

  // The standard gRPC health service, SERVING while registered: what the
  // chart's probes ask; and the worker's status for operators.
  std::atomic<bool> registered{false};
  std::unique_ptr<grpc::Server> health;
  WorkerStatusService status_service(config->worker_id, &registered, &supervisor);
  if (!config->health_listen.empty()) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&status_service);
    auto started = herd::BuildAndStartServer(builder, config->health_listen, grpc::InsecureServerCredentials());
    if (!started.ok()) {
      std::cerr << "herd-worker: --health-listen: " << started.status().message() << "\n";
      return 1;
    }
    health = std::move(started->server);
    herd::SetServing(health.get(), false);
    LOG(INFO) << "gRPC health service on port " << started->port;
  }
  DaemonOptions daemon_options;
  daemon_options.worker_id = config->worker_id;
  daemon_options.address = config->listen;
  daemon_options.device_kind = config->device;
  daemon_options.device_count = config->device_count();
  daemon_options.token = token;
  daemon_options.ready_file = config->ready_file;
  daemon_options.metrics_address = metrics_address;
  daemon_options.on_registered = [&health, &registered](bool now_registered) {
    registered = now_registered;
    herd::SetServing(health.get(), now_registered);
  };
  daemon_options.drain_timeout = SecondsToMillis(config->drain_timeout_seconds);
  daemon_options.checkpoint_root = config->checkpoint_root;
  Daemon daemon(daemon_options, herd::v1::ClusterService::NewStub(*channel), &supervisor, &metrics);
  // `herd logs`: this daemon's trainers' logs, sent when the coordinator asks.
  LogUplinkOptions log_options;
  log_options.worker_id = config->worker_id;
  log_options.token = token;
  log_options.log_path = [&supervisor](const std::string& job_id) {
    return herd::TrainerLogPath(supervisor.JobDir(job_id));
  };
  log_options.trainer_running = [&supervisor](const std::string& job_id) { return supervisor.Running(job_id); };
  LogUplink log_uplink(log_options, herd::v1::ClusterService::NewStub(*channel));
  log_uplink.Start();

  // SIGTERM (a pod's preStop or eviction, a spot notice) drains: the
  // trainers leave their jobs at the next step boundary, then Run()
  // returns. SIGINT, or SIGTERM again, stops at once.
  std::atomic<bool> run_returned{false};
  const bool drain_on_sigterm = config->drain_timeout_seconds > 0;
  std::thread signal_waiter([&daemon, &stop_signals, &run_returned, drain_on_sigterm] {
    bool draining = false;
    while (true) {
      int signal_number = 0;
      sigwait(&stop_signals, &signal_number);
      if (run_returned) return;  // the wake-up sent after a finished drain
      LOG(INFO) << "received " << strsignal(signal_number);
      if (signal_number == SIGTERM && drain_on_sigterm && !draining) {
        LOG(INFO) << "draining: leaving every job at its next step boundary (SIGINT or SIGTERM again stops now)";
        draining = true;
        daemon.Drain();
        continue;
      }
      daemon.Stop();
      return;
    }
  });
  LOG(INFO) << "herd-worker " << config->worker_id << " starting; coordinator " << config->coordinator
            << ", work dir " << config->work_dir << ", trainer " << config->trainer_binary;
  const bool drained = daemon.Run();  // returns after Stop() or a finished drain
  log_uplink.Stop();
  run_returned = true;
  kill(getpid(), SIGINT);  // ends the waiter's sigwait if it still waits
  signal_waiter.join();
  if (health) health->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return drained ? 0 : 1;
}
