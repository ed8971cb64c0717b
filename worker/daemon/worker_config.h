// herd-worker's command line: the flags, their defaults and their checks.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/labels.h"
#include "common/rpc_options.h"
#include "worker/contract/trainer_args.h"

namespace herd::worker {

struct WorkerConfig {
  std::string coordinator = "127.0.0.1:7070";  // one HOST:PORT, or several separated by commas
  std::string listen = "127.0.0.1";
  std::string metrics_listen = "127.0.0.1:9100";  // empty: no metrics server
  std::string health_listen;                      // empty: no gRPC health server
  std::string work_dir;
  // Checkpoint storage every trainer of this worker uses; shared by all
  // workers of a cluster. Default: $HERD_CHECKPOINT_ROOT, else
  // WORK_DIR/checkpoints (see FinishWorkerConfig).
  std::string checkpoint_root;
  std::string device = "cpu";
  std::string gpus;  // comma list as given; see gpu_indices
  std::vector<int> gpu_indices;
  std::string worker_id;
  std::string token_file;
  bool insecure_no_auth = false;
  TlsOptions tls;
  std::string trainer_binary;
  // Transport of the trainers' CPU collectives: tcp (the member-authenticated
  // TCP mesh) or gloo (unauthenticated; docs/security.md). Always the current
  // name: ParseWorkerFlags turns the old "herd" into "tcp".
  std::string data_plane = kTcpDataPlane;
  std::string congestion_control = "bbr";  // --data-plane-congestion-control
  int data_plane_lanes = kDefaultTcpMeshLanes;  // --data-plane-lanes
  double trainer_kill_grace_seconds = 5;
  double trainer_stuck_seconds = 600;
  // SIGTERM drains: the trainers leave their jobs at the next step boundary,
  // then the daemon exits; past this it stops them anyway (0: SIGTERM stops
  // at once). Keep it below the pod's terminationGracePeriodSeconds.
  double drain_timeout_seconds = 50;
  std::string ready_file;
  // --label KEY=VALUE as given (repeatable), and parsed by FinishWorkerConfig.
  std::vector<std::string> label_flags;
  Labels labels;

  int64_t device_count() const { return device == "cuda" ? static_cast<int64_t>(gpu_indices.size()) : 1; }
};

// Parses the flags (defaults from HERD_COORDINATOR where unset). Returns
// nullopt when the program should exit now with `*exit_code`: 0 after
// --help, 2 after a usage error (already printed to `err`).
std::optional<WorkerConfig> ParseWorkerFlags(int argc, const char* const* argv, std::ostream& out,
                                             std::ostream& err, int* exit_code);

// Checks flag combinations and fills what depends on the machine: the worker
// id (from `host_name` and the work dir), the trainer binary (herd-trainer
// next to `self_path`), GPU indices, the labels, an absolute work dir. Creates the work
// dir. INVALID_ARGUMENT / FAILED_PRECONDITION name the offending flag.
absl::Status FinishWorkerConfig(WorkerConfig* config, const std::string& host_name, const std::string& self_path);

// Parses "0,1,3" into indices; INVALID_ARGUMENT on anything else.
absl::Status ParseGpuList(const std::string& text, std::vector<int>* indices);

}  // namespace herd::worker
