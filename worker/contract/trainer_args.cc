#include "worker/contract/trainer_args.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <tuple>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/version.h"

namespace herd {
namespace {

constexpr char kExitCodePayload[] = "herd.trainer_args.exit_code";

// Ids and paths travel as argv text; a control character in one is a bug
// upstream, named here rather than written into logs and file names.
CLI::Validator NoControlCharacters() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        for (unsigned char c : value) {
          if (c < 0x20 || c == 0x7f) return absl::StrCat("control character in \"", absl::CHexEscape(value), "\"");
        }
        return "";
      },
      "");
}

// The one description of the flags: both the parser and the help text.
void AddFlags(CLI::App* app, TrainerArgs* args) {
  const CLI::Validator text = NoControlCharacters();
  app->add_option("--coordinator", args->coordinator,
                  "coordinator address host:port, or several separated by commas (the leader among them is called)")
      ->check(text)
      ->capture_default_str();
  app->add_option("--job", args->job, "job id")->required()->check(text);
  app->add_option("--worker-id", args->worker_id, "this worker's id")->required()->check(text);
  app->add_option("--work-dir", args->work_dir, "this job's folder on the worker")->required()->check(text);
  app->add_option("--device", args->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app->add_option("--gpu", args->gpu, "GPU index for device cuda");
  app->add_option("--token-file", args->token_file, "bearer token file")->check(text);
  app->add_flag("--insecure-no-auth", args->insecure_no_auth, "call the coordinator without a token");
  app->add_option("--tls-ca", args->tls_ca, "CA certificate to verify the coordinator")->check(text);
  app->add_option("--tls-cert", args->tls_cert, "client certificate (mutual TLS)")->check(text);
  app->add_option("--tls-key", args->tls_key, "client key (mutual TLS)")->check(text);
  app->add_option("--termination-message-file", args->termination_message_file, "where to write the failure reason")
      ->check(text);
  app->add_option("--alive-file", args->alive_file,
                  "file whose mtime this trainer refreshes while it makes progress (the daemon's stuck check)")
      ->check(text);
  app->add_option("--join-timeout-seconds", args->join_timeout_seconds,
                  "how long to wait for a generation: the first, the next after a failure, or re-admission after "
                  "this worker was left out of one (the job context is kept meanwhile)")
      ->capture_default_str();
  app->add_option("--checkpoint-root", args->checkpoint_root,
                  "checkpoint storage, shared by the job's workers (the daemon passes it; default: "
                  "$HERD_CHECKPOINT_ROOT)")
      ->check(text);
  app->add_option("--collective-timeout-seconds", args->collective_timeout_seconds,
                  "timeout of every collective (default: the job's collective_timeout_seconds)");
  app->add_option("--data-plane", args->data_plane,
                  "transport of the CPU collectives: tcp (herd's TCP mesh: connections proven members of the "
                  "generation) or gloo; herd is tcp's old name, still accepted")
      ->check(CLI::IsMember({kTcpDataPlane, kGlooDataPlane, kOldTcpDataPlane}))
      ->capture_default_str();
  app->add_option("--data-plane-congestion-control", args->congestion_control,
                  "TCP congestion control of the TCP mesh's sockets, or default (the kernel's)")
      ->check(text)
      ->capture_default_str();
  app->add_option("--data-plane-lanes", args->data_plane_lanes,
                  "connections per pair of ranks in the TCP mesh, one collective on each at a time")
      ->check(CLI::Range(1, kMaxTcpMeshLanes))
      ->capture_default_str();
  app->set_version_flag("--version", std::string("herd-trainer ") + kVersion);
}

// Shortest text that parses back to the same double.
std::string FormatDouble(double value) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, end);
}

auto Fields(const TrainerArgs& a) {
  return std::tie(a.action, a.output, a.coordinator, a.job, a.worker_id, a.work_dir, a.device, a.gpu, a.token_file,
                  a.insecure_no_auth, a.tls_ca, a.tls_cert, a.tls_key, a.termination_message_file, a.alive_file,
                  a.join_timeout_seconds, a.checkpoint_root, a.collective_timeout_seconds, a.data_plane,
                  a.congestion_control, a.data_plane_lanes);
}

}  // namespace

bool operator==(const TrainerArgs& a, const TrainerArgs& b) { return Fields(a) == Fields(b); }

std::string CurrentDataPlaneName(const std::string& data_plane, std::string* warning) {
  const bool old = data_plane == kOldTcpDataPlane;
  if (warning != nullptr) {
    *warning = old ? absl::StrCat("--data-plane=", kOldTcpDataPlane, " is the old name of --data-plane=",
                                  kTcpDataPlane, " (herd's TCP mesh); it still works, but use ", kTcpDataPlane)
                   : "";
  }
  return old ? kTcpDataPlane : data_plane;
}

std::vector<std::string> ToArgv(const TrainerArgs& args) {
  const TrainerArgs defaults;
  std::vector<std::string> argv = {
      absl::StrCat("--coordinator=", args.coordinator), absl::StrCat("--job=", args.job),
      absl::StrCat("--worker-id=", args.worker_id),     absl::StrCat("--work-dir=", args.work_dir),
      absl::StrCat("--device=", args.device),
  };
  if (args.gpu >= 0) argv.push_back(absl::StrCat("--gpu=", args.gpu));
  if (args.insecure_no_auth) {
    argv.push_back("--insecure-no-auth");
  } else if (!args.token_file.empty()) {
    argv.push_back(absl::StrCat("--token-file=", args.token_file));
  }
  if (!args.tls_ca.empty()) argv.push_back(absl::StrCat("--tls-ca=", args.tls_ca));
  if (!args.tls_cert.empty()) argv.push_back(absl::StrCat("--tls-cert=", args.tls_cert));
  if (!args.tls_key.empty()) argv.push_back(absl::StrCat("--tls-key=", args.tls_key));
  if (!args.termination_message_file.empty()) {
    argv.push_back(absl::StrCat("--termination-message-file=", args.termination_message_file));
  }
  if (!args.alive_file.empty()) argv.push_back(absl::StrCat("--alive-file=", args.alive_file));
  if (args.join_timeout_seconds != defaults.join_timeout_seconds) {
    argv.push_back(absl::StrCat("--join-timeout-seconds=", FormatDouble(args.join_timeout_seconds)));
  }
  if (!args.checkpoint_root.empty()) argv.push_back(absl::StrCat("--checkpoint-root=", args.checkpoint_root));
  if (args.collective_timeout_seconds != defaults.collective_timeout_seconds) {
    argv.push_back(absl::StrCat("--collective-timeout-seconds=", FormatDouble(args.collective_timeout_seconds)));
  }
  if (args.data_plane != defaults.data_plane) argv.push_back(absl::StrCat("--data-plane=", args.data_plane));
  if (args.congestion_control != defaults.congestion_control) {
    argv.push_back(absl::StrCat("--data-plane-congestion-control=", args.congestion_control));
  }
  if (args.data_plane_lanes != defaults.data_plane_lanes) {
    argv.push_back(absl::StrCat("--data-plane-lanes=", args.data_plane_lanes));
  }
  return argv;
}

absl::StatusOr<TrainerArgs> ParseArgv(int argc, const char* const* argv) {
  TrainerArgs args;
  if (argc == 2 && std::string(argv[1]) == kProbeDevicesFlag) {
    args.action = TrainerArgs::Action::kProbeDevices;
    return args;
  }
  if (argc == 2 && std::string(argv[1]) == kProbeOpenBlasFlag) {
    args.action = TrainerArgs::Action::kProbeOpenBlas;
    return args;
  }
  CLI::App app{"herd-trainer: runs one job's training steps (started by herd-worker, not by hand; "
               "--probe-devices alone prints how many GPUs it sees, --probe-openblas which OpenBLAS kernels it trains on)"};
  AddFlags(&app, &args);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    args.action = TrainerArgs::Action::kPrintAndExit;
    args.output = app.help();
  } catch (const CLI::CallForVersion& e) {
    args.action = TrainerArgs::Action::kPrintAndExit;
    args.output = std::string(e.what()) + "\n";
  } catch (const CLI::ParseError& e) {
    absl::Status status = absl::InvalidArgumentError(e.what());
    status.SetPayload(kExitCodePayload, absl::Cord(absl::StrCat(e.get_exit_code())));
    return status;
  }
  return args;
}

int ExitCodeForBadArgs(const absl::Status& status) {
  int code = 0;
  if (auto payload = status.GetPayload(kExitCodePayload); payload && absl::SimpleAtoi(payload->Flatten(), &code)) {
    return code;
  }
  return static_cast<int>(CLI::ExitCodes::BaseClass);
}

}  // namespace herd
