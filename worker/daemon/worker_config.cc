#include "worker/daemon/worker_config.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/leader_channel.h"
#include "common/version.h"
#include "worker/daemon/identifiers.h"

namespace herd::worker {

std::optional<WorkerConfig> ParseWorkerFlags(int argc, const char* const* argv, std::ostream& out,
                                             std::ostream& err, int* exit_code) {
  WorkerConfig config;
  if (const char* env = std::getenv("HERD_COORDINATOR"); env != nullptr && *env != '\0') config.coordinator = env;
  if (const char* env = std::getenv("HERD_CHECKPOINT_ROOT"); env != nullptr && *env != '\0') {
    config.checkpoint_root = env;
  }

  CLI::App app("herd-worker: runs herd trainers on this node for the jobs the coordinator assigns it.",
               "herd-worker");
  app.add_option("--coordinator", config.coordinator,
                 "Coordinator address host:port, or several separated by commas (coordinators on etcd: the leader "
                 "among them is followed); default: $HERD_COORDINATOR")
      ->capture_default_str();
  app.add_option("--listen", config.listen,
                 "Host that peers use to reach this worker's trainers (data plane); sent to the coordinator")
      ->capture_default_str();
  app.add_option("--metrics-listen", config.metrics_listen,
                 "host:port for the Prometheus /metrics endpoint (default 127.0.0.1:9100); empty disables "
                 "it; port 0 picks a free port")
      // "--metrics-listen=" means empty rather than "take the next argument".
      // No captured default: CLI11 would put it back for an empty value.
      ->expected(0, 1);
  app.add_option("--health-listen", config.health_listen,
                 "host:port for the standard gRPC health service (grpc.health.v1; SERVING while registered "
                 "with the coordinator), for Kubernetes gRPC probes; empty (the default) disables it")
      ->expected(0, 1);
  app.add_option("--work-dir", config.work_dir, "Folder for job working dirs and trainer logs (created)")->required();
  app.add_option("--device", config.device, "Device kind the trainers use")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--checkpoint-root", config.checkpoint_root,
                 "Checkpoint storage for this worker's trainers, shared by all workers of the cluster (default: "
                 "$HERD_CHECKPOINT_ROOT, else WORK_DIR/checkpoints)");
  app.add_option("--gpus", config.gpus, "Comma list of GPU indices this daemon may use (cuda; default 0)");
  app.add_option("--worker-id", config.worker_id,
                 "Stable worker name, [A-Za-z0-9._-]{1,128} (default: host name + work dir name)");
  auto* token = app.add_option("--token-file", config.token_file, "File holding the bearer token for the coordinator");
  auto* insecure = app.add_flag("--insecure-no-auth", config.insecure_no_auth,
                                "Send no bearer token (local demos only)");
  token->excludes(insecure);
  insecure->excludes(token);
  app.add_option("--tls-ca", config.tls.ca_file, "CA certificate to verify the coordinator (enables TLS)");
  app.add_option("--tls-cert", config.tls.cert_file, "Client certificate for mutual TLS");
  app.add_option("--tls-key", config.tls.key_file, "Client private key for mutual TLS");
  app.add_option("--trainer-binary", config.trainer_binary,
                 "Trainer executable (default: herd-trainer next to this program)");
  app.add_option("--data-plane", config.data_plane,
                 "Transport of the trainers' CPU collectives: tcp (herd's TCP mesh: each connection proves "
                 "membership of the generation; refusals are audited) or gloo (unauthenticated). herd is the old "
                 "name of tcp, still accepted")
      ->check(CLI::IsMember({kTcpDataPlane, kGlooDataPlane, kOldTcpDataPlane}))
      ->capture_default_str();
  app.add_option("--data-plane-congestion-control", config.congestion_control,
                 "TCP congestion control of the TCP mesh's sockets (TCP_CONGESTION), or default for the "
                 "kernel's. bbr does not fall back to the initial window after idle, which an averaging "
                 "round's burst would otherwise pay on a long link; where the kernel lacks or forbids it, the "
                 "trainer logs the one it got")
      ->capture_default_str();
  app.add_option("--data-plane-lanes", config.data_plane_lanes,
                 "Connections per pair of ranks in the TCP mesh, each carrying one collective at a time, so "
                 "that many collectives are on the wire at once: on a long link an averaging round of one "
                 "fragment need not queue behind another's, and gradient buckets overlap their round trips")
      ->check(CLI::Range(1, kMaxTcpMeshLanes))
      ->capture_default_str();
  app.add_option("--trainer-kill-grace-seconds", config.trainer_kill_grace_seconds,
                 "Seconds between SIGTERM and SIGKILL when stopping a trainer")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--trainer-stuck-seconds", config.trainer_stuck_seconds,
                 "Kill a trainer that shows no sign of progress for this long (0: never); keep it above the jobs' "
                 "collective_timeout_seconds")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--drain-timeout-seconds", config.drain_timeout_seconds,
                 "On SIGTERM, wait this long for the trainers to leave their jobs at a step boundary (drain) before "
                 "stopping them; 0: SIGTERM stops at once. SIGINT, or a second SIGTERM, always stops at once")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--ready-file", config.ready_file,
                 "Once registered, write {\"worker_id\":...,\"metrics\":\"host:port\"} here (atomically)");

  app.add_option("--label", config.label_flags,
                 "KEY=VALUE, repeatable: a label the coordinator keeps with this worker (shown by herd workers, "
                 "matched by a job's placement.require, grouped by its sync.islands_by). Keys and values: 1 to 63 "
                 "letters, digits, '-', '_' or '.', beginning and ending with a letter or digit; at most 32 labels")
      ->allow_extra_args(false);

  app.set_version_flag("--version", std::string("herd-worker ") + kVersion);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e, out, err);
    *exit_code = code == 0 ? 0 : 2;
    return std::nullopt;
  }
  if (!config.token_file.empty() == config.insecure_no_auth) {
    err << "herd-worker: exactly one of --token-file and --insecure-no-auth is required\n";
    *exit_code = 2;
    return std::nullopt;
  }
  std::string old_name;
  config.data_plane = CurrentDataPlaneName(config.data_plane, &old_name);
  if (!old_name.empty()) err << "herd-worker: " << old_name << "\n";
  *exit_code = 0;
  return config;
}

absl::Status ParseGpuList(const std::string& text, std::vector<int>* indices) {
  indices->clear();
  std::set<int> seen;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int index = 0;
    if (!absl::SimpleAtoi(part, &index) || index < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--gpus: '", part, "' is not a GPU index"));
    }
    if (!seen.insert(index).second) {
      return absl::InvalidArgumentError(absl::StrCat("--gpus: GPU ", index, " is listed twice"));
    }
    indices->push_back(index);
  }
  return absl::OkStatus();
}

absl::Status FinishWorkerConfig(WorkerConfig* config, const std::string& host_name, const std::string& self_path) {
  if (config->device == "cuda") {
    if (absl::Status s = ParseGpuList(config->gpus.empty() ? "0" : config->gpus, &config->gpu_indices); !s.ok()) {
      return s;
    }
  } else if (!config->gpus.empty()) {
    return absl::InvalidArgumentError("--gpus needs --device=cuda");
  }
  absl::StatusOr<Labels> labels = ParseLabelFlags(config->label_flags);
  if (!labels.ok()) return labels.status();
  config->labels = *std::move(labels);
  if (config->coordinator.empty()) return absl::InvalidArgumentError("--coordinator: empty address");
  if (auto addresses = ParseCoordinatorAddresses(config->coordinator); !addresses.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--coordinator: ", addresses.status().message()));
  }
  if (config->listen.empty()) return absl::InvalidArgumentError("--listen: empty host");

  std::error_code error;
  std::filesystem::path work_dir = std::filesystem::absolute(config->work_dir, error);
  if (!error) std::filesystem::create_directories(work_dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("--work-dir: cannot create ", config->work_dir, ": ", error.message()));
  }
  config->work_dir = work_dir.lexically_normal().string();
  while (config->work_dir.size() > 1 && config->work_dir.back() == '/') config->work_dir.pop_back();

  if (config->checkpoint_root.empty()) config->checkpoint_root = config->work_dir + "/checkpoints";

  if (config->worker_id.empty()) config->worker_id = DefaultWorkerId(host_name, config->work_dir);
  if (!IsValidWorkerId(config->worker_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--worker-id: '", config->worker_id, "' must match [A-Za-z0-9._-]{1,128}"));
  }

  if (config->trainer_binary.empty()) {
    config->trainer_binary = (std::filesystem::path(self_path).parent_path() / "herd-trainer").string();
  }
  if (access(config->trainer_binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("trainer binary ", config->trainer_binary,
                                                      " is missing or not executable (set --trainer-binary)"));
  }
  return absl::OkStatus();
}

}  // namespace herd::worker
