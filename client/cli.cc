#include "client/cli.h"

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>

#include "client/commands.h"
#include "common/auth.h"
#include "common/job_spec.h"
#include "common/rpc_options.h"
#include "common/version.h"

namespace herd::client {
namespace {

constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";

struct GlobalFlags {
  std::string coordinator;
  std::string token_file;
  bool insecure_no_auth = false;
  TlsOptions tls;
  double timeout_seconds = 10;
  std::string output = "table";
};

// The global options, accepted before the subcommand and after it (so that
// `herd list -o json` works and `herd list --help` shows them).
void AddGlobalOptions(CLI::App* app, GlobalFlags* flags) {
  app->add_option("--coordinator", flags->coordinator, "Coordinator address host:port (else $HERD_COORDINATOR)")
      ->capture_default_str();
  app->add_option("--token-file", flags->token_file, "File holding the bearer token (else $HERD_TOKEN_FILE)")
      ->expected(0, 1);
  app->add_flag("--insecure-no-auth", flags->insecure_no_auth,
                "Send no bearer token, even when $HERD_TOKEN_FILE is set");
  app->add_option("--tls-ca", flags->tls.ca_file, "CA certificate to verify the coordinator (enables TLS)");
  app->add_option("--tls-cert", flags->tls.cert_file, "Client certificate for mutual TLS");
  app->add_option("--tls-key", flags->tls.key_file, "Client private key for mutual TLS");
  app->add_option("--timeout", flags->timeout_seconds, "Deadline of each call to the coordinator, in seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app->add_option("-o,--output", flags->output, "Output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
}

}  // namespace

int RunCli(int argc, const char* const* argv, const CliEnvironment& environment) {
  GlobalFlags flags;
  flags.coordinator = environment.coordinator.empty() ? kDefaultCoordinator : environment.coordinator;
  flags.token_file = environment.token_file;

  CLI::App app("herd: submit, watch and manage data-parallel training jobs.", "herd");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("herd ") + kVersion);
  AddGlobalOptions(&app, &flags);

  std::string job_file;
  std::string job_id;
  bool watch_after_submit = false;
  auto add_job_id = [&job_id](CLI::App* command) {
    command->add_option("JOB", job_id, "Job id")->required();
  };

  CLI::App* submit = app.add_subcommand("submit", "Submit the job described by a YAML file; prints its id");
  submit->add_option("FILE", job_file, "Job spec (YAML)")->required();
  submit->add_flag("--watch", watch_after_submit, "Then follow the job like `herd watch`");
  std::optional<int64_t> submit_priority;
  submit->add_option("--priority", submit_priority, "Scheduling priority (replaces the file's `priority`)")
      ->check(CLI::Range(kMinPriority, kMaxPriority));
  CLI::App* list = app.add_subcommand("list", "List jobs");
  CLI::App* status = app.add_subcommand("status", "Show one job in detail");
  add_job_id(status);
  CLI::App* watch = app.add_subcommand("watch", "Follow a job's progress until it ends (exit 0 if it succeeded)");
  add_job_id(watch);
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job");
  add_job_id(cancel);
  CLI::App* workers = app.add_subcommand("workers", "List worker daemons");
  CLI::App* checkpoints = app.add_subcommand("checkpoints", "List a job's checkpoints");
  add_job_id(checkpoints);
  LogsOptions logs_options;
  CLI::App* logs = app.add_subcommand(
      "logs", "Print a trainer's log (stdout and stderr), read through the coordinator from its worker");
  logs->add_option("JOB", logs_options.job_id, "Job id")->required();
  logs->add_option("-r,--rank", logs_options.rank, "Rank in the job's current (or last) generation")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  logs->add_flag("-f,--follow", logs_options.follow, "Keep printing new lines until that trainer exits");
  logs->add_option("--tail", logs_options.tail_lines, "Only the last N lines (0: the whole log)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI::App* resize = app.add_subcommand(
      "resize", "Change a job's worker range; a running job shrinks at its next step boundary or grows into idle workers");
  add_job_id(resize);
  int64_t resize_min = 0, resize_max = 0;
  resize->add_option("--min", resize_min, "New min_workers")->check(CLI::PositiveNumber);
  resize->add_option("--max", resize_max, "New max_workers")->check(CLI::PositiveNumber);
  CLI::App* priority = app.add_subcommand("priority", "Change a job's scheduling priority (higher runs first)");
  add_job_id(priority);
  int64_t new_priority = 0;
  priority->add_option("P", new_priority, "New priority")->required()->check(CLI::Range(kMinPriority, kMaxPriority));
  std::string worker_id;
  auto add_worker_id = [&worker_id](CLI::App* command) {
    command->add_option("WORKER", worker_id, "Worker id (see herd workers)")->required();
  };
  CLI::App* cordon = app.add_subcommand("cordon", "Place no new job on a worker; its running job goes on (admin)");
  add_worker_id(cordon);
  CLI::App* uncordon = app.add_subcommand("uncordon", "Let a cordoned worker take jobs again (admin)");
  add_worker_id(uncordon);
  CLI::App* drain = app.add_subcommand(
      "drain",
      "Cordon a worker and have each job it runs release it at the next step boundary: the job commits that step "
      "and goes on without it, losing nothing (admin). The daemon keeps running, cordoned; herd uncordon undoes it");
  add_worker_id(drain);
  DrainOptions drain_options;
  drain->add_flag("--wait", drain_options.wait,
                  "Return once the worker has left its jobs (it is IDLE, or DEAD); prints progress to stderr");
  drain->add_option("--wait-timeout", drain_options.timeout_seconds,
                    "With --wait: give up after this many seconds, exit 1 (0: wait forever; --timeout is each call's)")
      ->default_val(300)
      ->check(CLI::NonNegativeNumber);
  for (CLI::App* command : {submit, list, status, watch, cancel, workers, checkpoints, resize, priority, logs, cordon, uncordon, drain}) {
    AddGlobalOptions(command, &flags);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e, *environment.out, *environment.err);
    return code == 0 ? kExitOk : kExitUsage;
  }

  if (*resize && resize_min == 0 && resize_max == 0) {
    *environment.err << "herd resize: give --min, --max or both\n";
    return kExitUsage;
  }

  CommandOptions options;
  options.coordinator = flags.coordinator;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_seconds * 1000));
  options.output = flags.output == "json" ? OutputFormat::kJson : OutputFormat::kTable;
  options.tty = environment.stdout_is_tty && options.output == OutputFormat::kTable;
  if (!flags.token_file.empty() && !flags.insecure_no_auth) {
    absl::StatusOr<std::string> token = ReadTokenFile(flags.token_file);
    if (!token.ok()) {
      *environment.err << "herd: " << token.status().message() << "\n";
      return kExitUsage;
    }
    options.token = *token;
  }
  auto channel = MakeChannel(flags.coordinator, flags.tls);
  if (!channel.ok()) {
    *environment.err << "herd: " << channel.status().message() << "\n";
    return kExitUsage;
  }
  std::unique_ptr<v1::JobService::Stub> stub = v1::JobService::NewStub(*channel);
  CommandContext context{stub.get(), options, environment.out, environment.err, environment.clock};

  if (*submit) return SubmitCommand(context, job_file, watch_after_submit, submit_priority);
  if (*list) return ListCommand(context);
  if (*status) return StatusCommand(context, job_id);
  if (*watch) return WatchCommand(context, job_id);
  if (*cancel) return CancelCommand(context, job_id);
  if (*workers) return WorkersCommand(context);
  if (*checkpoints) return CheckpointsCommand(context, job_id);
  if (*logs) return LogsCommand(context, logs_options);
  if (*resize) return ResizeCommand(context, job_id, resize_min, resize_max);
  if (*priority) return PriorityCommand(context, job_id, new_priority);
  if (*cordon) return CordonCommand(context, worker_id, true);
  if (*uncordon) return CordonCommand(context, worker_id, false);
  if (*drain) {
    drain_options.worker_id = worker_id;
    return DrainCommand(context, drain_options);
  }
  return kExitUsage;  // unreachable: a subcommand is required
}

}  // namespace herd::client
