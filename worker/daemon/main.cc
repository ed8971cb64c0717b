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
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/grpc_serving.h"
#include "common/leader_channel.h"
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

// Prints why herd-worker cannot start and gives its exit code.
int CannotStart(const absl::Status& status, int exit_code) {
  std::cerr << "herd-worker: " << status.message() << "\n";
  return exit_code;
}

// Blocks the stop signals before any thread exists, so every thread inherits
// the mask and only the waiter (RunUntilStopped) receives them. Trainers get
// a clean mask (see trainer_process.cc).
sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

// The flags, completed from the machine, and checked against the GPUs the
// trainers see. Returns nullopt when herd-worker exits now with `*exit_code`.
std::optional<herd::worker::WorkerConfig> LoadConfig(int argc, char** argv, int* exit_code) {
  using namespace herd::worker;
  std::optional<WorkerConfig> config = ParseWorkerFlags(argc, argv, std::cout, std::cerr, exit_code);
  if (!config.has_value()) return std::nullopt;
  std::error_code error;
  std::string self_path = std::filesystem::read_symlink("/proc/self/exe", error).string();
  if (absl::Status s = FinishWorkerConfig(&*config, HostName(), self_path); !s.ok()) {
    *exit_code = CannotStart(s, 2);
    return std::nullopt;
  }
  if (config->device == "cuda") {
    auto visible = ProbeCudaDevices(config->trainer_binary);
    absl::Status offered =
        visible.ok() ? CheckOfferedGpus(config->device, config->gpu_indices, *visible, config->trainer_binary)
                     : visible.status();
    if (!offered.ok()) {
      *exit_code = CannotStart(offered, 2);
      return std::nullopt;
    }
  }
  return config;
}

// The bearer token; empty when auth is off.
absl::StatusOr<std::string> ReadToken(const herd::worker::WorkerConfig& config) {
  if (config.insecure_no_auth) return std::string();
  auto read = herd::ReadTokenFile(config.token_file);
  if (!read.ok()) return absl::Status(read.status().code(), absl::StrCat("--token-file: ", read.status().message()));
  return read;
}

// The daemon's Prometheus endpoint (none when --metrics-listen is empty).
struct MetricsEndpoint {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  std::string address;  // advertised host:port; empty without an exposer
};

absl::Status StartMetricsEndpoint(const std::string& listen, MetricsEndpoint* endpoint) {
  if (listen.empty()) return absl::OkStatus();
  try {
    endpoint->exposer = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen ", listen, ": ", e.what()));
  }
  endpoint->exposer->RegisterCollectable(endpoint->registry);
  endpoint->address =
      herd::worker::AdvertisedMetricsAddress(listen, endpoint->exposer->GetListeningPorts().at(0));
  LOG(INFO) << "metrics on http://" << endpoint->address << "/metrics";
  return absl::OkStatus();
}

herd::worker::SupervisorOptions SupervisorOptionsFor(const herd::worker::WorkerConfig& config) {
  herd::worker::SupervisorOptions options;
  options.work_dir = config.work_dir;
  options.command.trainer_binary = config.trainer_binary;
  options.command.coordinator = config.coordinator;
  options.command.worker_id = config.worker_id;
  options.command.device = config.device;
  options.command.token_file = config.token_file;
  options.command.insecure_no_auth = config.insecure_no_auth;
  options.command.tls = config.tls;
  options.command.checkpoint_root = config.checkpoint_root;
  options.command.data_plane = config.data_plane;
  options.command.congestion_control = config.congestion_control;
  options.command.data_plane_lanes = config.data_plane_lanes;
  options.gpus = config.gpu_indices;
  options.kill_grace = SecondsToMillis(config.trainer_kill_grace_seconds);
  options.stuck_after = SecondsToMillis(config.trainer_stuck_seconds);
  return options;
}

// The standard gRPC health service, SERVING while registered: what the
// chart's probes ask; and the worker's status for operators. Null when
// --health-listen is empty.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartHealthServer(const std::string& listen,
                                                                WorkerStatusService* status_service) {
  if (listen.empty()) return nullptr;
  grpc::ServerBuilder builder;
  builder.RegisterService(status_service);
  auto started = herd::BuildAndStartServer(builder, listen, grpc::InsecureServerCredentials());
  if (!started.ok()) return absl::Status(started.status().code(), absl::StrCat("--health-listen: ", started.status().message()));
  herd::SetServing(started->server.get(), false);
  LOG(INFO) << "gRPC health service on port " << started->port;
  return std::move(started->server);
}

herd::worker::DaemonOptions DaemonOptionsFor(const herd::worker::WorkerConfig& config, const std::string& token,
                                             const std::string& metrics_address) {
  herd::worker::DaemonOptions options;
  options.worker_id = config.worker_id;
  options.address = config.listen;
  options.device_kind = config.device;
  options.device_count = config.device_count();
  options.labels = config.labels;
  options.token = token;
  options.ready_file = config.ready_file;
  options.metrics_address = metrics_address;
  options.drain_timeout = SecondsToMillis(config.drain_timeout_seconds);
  options.checkpoint_root = config.checkpoint_root;
  return options;
}

// `herd logs` and `herd fetch`: this daemon's trainers' logs and model files, sent when the coordinator asks.
herd::worker::LogUplinkOptions LogUplinkOptionsFor(const herd::worker::WorkerConfig& config, const std::string& token,
                                                   herd::worker::TrainerSupervisor* supervisor) {
  herd::worker::LogUplinkOptions options;
  options.worker_id = config.worker_id;
  options.token = token;
  options.log_path = [supervisor](const std::string& job_id) {
    return herd::TrainerLogPath(supervisor->JobDir(job_id));
  };
  options.trainer_running = [supervisor](const std::string& job_id) { return supervisor->Running(job_id); };
  options.job_dir = [supervisor](const std::string& job_id) { return supervisor->JobDir(job_id); };
  options.checkpoint_root = config.checkpoint_root;
  return options;
}

// Runs the daemon until it stops; returns whether it drained. SIGTERM (a
// pod's preStop or eviction, a spot notice) drains when `drain_on_sigterm`:
// the trainers leave their jobs at the next step boundary, then Run()
// returns. SIGINT, or SIGTERM again, stops at once.
bool RunUntilStopped(herd::worker::Daemon* daemon, herd::worker::LogUplink* log_uplink,
                     const sigset_t& stop_signals, bool drain_on_sigterm) {
  std::atomic<bool> run_returned{false};
  std::thread signal_waiter([daemon, &stop_signals, &run_returned, drain_on_sigterm] {
    bool draining = false;
    while (true) {
      int signal_number = 0;
      sigwait(&stop_signals, &signal_number);
      if (run_returned) return;  // the wake-up sent after a finished drain
      LOG(INFO) << "received " << strsignal(signal_number);
      if (signal_number == SIGTERM && drain_on_sigterm && !draining) {
        LOG(INFO) << "draining: leaving every job at its next step boundary (SIGINT or SIGTERM again stops now)";
        draining = true;
        daemon->Drain();
        continue;
      }
      daemon->Stop();
      return;
    }
  });
  const bool drained = daemon->Run();  // returns after Stop() or a finished drain
  log_uplink->Stop();
  run_returned = true;
  kill(getpid(), SIGINT);  // ends the waiter's sigwait if it still waits
  signal_waiter.join();
  return drained;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace herd::worker;
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  const sigset_t stop_signals = BlockStopSignals();

  int exit_code = 0;
  const std::optional<WorkerConfig> config = LoadConfig(argc, argv, &exit_code);
  if (!config.has_value()) return exit_code;
  const absl::StatusOr<std::string> token = ReadToken(*config);
  if (!token.ok()) return CannotStart(token.status(), 2);
  auto coordinator = herd::LeaderChannel::Open(config->coordinator, config->tls);
  if (!coordinator.ok()) return CannotStart(coordinator.status(), 2);

  MetricsEndpoint endpoint;
  if (absl::Status s = StartMetricsEndpoint(config->metrics_listen, &endpoint); !s.ok()) return CannotStart(s, 1);
  WorkerMetrics metrics(*endpoint.registry, config->worker_id, config->device, config->labels);
  // The trainers' metrics join this daemon's at scrape time (one target per worker).
  auto trainer_metrics = std::make_shared<TrainerMetricsCollector>();
  if (endpoint.exposer) endpoint.exposer->RegisterCollectable(trainer_metrics);
  TrainerSupervisor supervisor(SupervisorOptionsFor(*config), &metrics,
                               endpoint.exposer ? trainer_metrics.get() : nullptr);

  std::atomic<bool> registered{false};
  WorkerStatusService status_service(config->worker_id, &registered, &supervisor);
  auto health = StartHealthServer(config->health_listen, &status_service);
  if (!health.ok()) return CannotStart(health.status(), 1);
  DaemonOptions daemon_options = DaemonOptionsFor(*config, *token, endpoint.address);
  daemon_options.on_registered = [health = health->get(), &registered](bool now_registered) {
    registered = now_registered;
    herd::SetServing(health, now_registered);
  };
  Daemon daemon(daemon_options, *coordinator, &supervisor, &metrics);
  LogUplink log_uplink(LogUplinkOptionsFor(*config, *token, &supervisor), *coordinator);
  log_uplink.Start();

  LOG(INFO) << "herd-worker " << config->worker_id << " starting; coordinator " << config->coordinator
            << ", work dir " << config->work_dir << ", trainer " << config->trainer_binary;
  const bool drained = RunUntilStopped(&daemon, &log_uplink, stop_signals, config->drain_timeout_seconds > 0);
  if (*health) (*health)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return drained ? 0 : 1;
}
