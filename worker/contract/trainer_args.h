// herd-trainer's command line, in one place: what the daemon passes each
// trainer it starts (ToArgv) and what the trainer reads back (ParseArgv).
// No other file spells a trainer flag.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/tcp_mesh_lanes.h"

namespace herd {

// `herd-trainer --probe-devices` alone prints "cuda_devices N" and exits
// (worker/daemon/device_probe.h asks it before the daemon registers).
constexpr char kProbeDevicesFlag[] = "--probe-devices";
// `herd-trainer --probe-openblas` alone prints "openblas_core NAME" (the
// OpenBLAS kernels trainers here run on, worker/train/optim/openblas_kernels.h;
// empty without OpenBLAS) and exits: benches give the DDP side the same.
constexpr char kProbeOpenBlasFlag[] = "--probe-openblas";

// The CPU data plane's names (herd-worker's and herd-trainer's --data-plane):
// "tcp", herd's own member-authenticated TCP mesh, and "gloo".
constexpr char kTcpDataPlane[] = "tcp";
constexpr char kGlooDataPlane[] = "gloo";
// The TCP mesh's old name, still accepted for "tcp".
constexpr char kOldTcpDataPlane[] = "herd";

// `data_plane` in its current spelling: the old "herd" becomes "tcp", any
// other value comes back as it is. `warning` (if not null) gets the line to
// log once when the old name was given, and is cleared otherwise.
std::string CurrentDataPlaneName(const std::string& data_plane, std::string* warning = nullptr);

struct TrainerArgs {
  // What the command line asks for: training, a probe, or only
  // printing `output` (--help, --version) and exiting 0.
  enum class Action { kTrain, kProbeDevices, kProbeOpenBlas, kPrintAndExit };
  Action action = Action::kTrain;
  std::string output;  // kPrintAndExit: the help text or version line

  std::string coordinator = "127.0.0.1:7070";  // host:port
  std::string job;
  std::string worker_id;
  std::string work_dir;  // this job's folder on the worker
  std::string device = "cpu";  // cpu, cuda
  int gpu = -1;  // GPU index for device cuda; -1: not given
  std::string token_file;
  bool insecure_no_auth = false;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string termination_message_file;
  std::string alive_file;
  double join_timeout_seconds = 300;
  std::string checkpoint_root;  // empty: $HERD_CHECKPOINT_ROOT
  double collective_timeout_seconds = 0;  // 0: the job's collective_timeout_seconds
  // The CPU collectives' transport: "tcp" (the member-authenticated TCP
  // mesh) or "gloo" (herd-worker --data-plane); "herd" is accepted for "tcp".
  std::string data_plane = kTcpDataPlane;
  // The TCP mesh's congestion control per socket (herd-worker
  // --data-plane-congestion-control); "default": the kernel's.
  std::string congestion_control = "bbr";
  // Connections per pair of ranks in the TCP mesh (herd-worker
  // --data-plane-lanes).
  int data_plane_lanes = kDefaultTcpMeshLanes;
};

bool operator==(const TrainerArgs& a, const TrainerArgs& b);
inline bool operator!=(const TrainerArgs& a, const TrainerArgs& b) { return !(a == b); }

// The flags for `args` (without argv[0]), in a fixed order. Optional flags at
// their defaults are left out (an empty token_file too: the trainer then
// asks for --token-file or --insecure-no-auth).
std::vector<std::string> ToArgv(const TrainerArgs& args);

// Parses a trainer's argv (argv[0] is the program). The error names the
// unknown or malformed flag; ExitCodeForBadArgs gives its exit code.
absl::StatusOr<TrainerArgs> ParseArgv(int argc, const char* const* argv);

// The exit code the trainer gives for a ParseArgv error (CLI11's, so the
// codes are what they always were).
int ExitCodeForBadArgs(const absl::Status& status);

// The line printed after a ParseArgv error.
constexpr char kBadArgsHint[] = "Run with --help for more information.";

}  // namespace herd
