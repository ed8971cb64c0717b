#include "client/cli_args.h"

#include <CLI/CLI.hpp>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "common/version.h"

namespace herd::client {
namespace {

constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";

// The global options, accepted before the subcommand and after it (so that
// `herd list -o json` works and `herd list --help` shows them).
void AddGlobalOptions(CLI::App* app, GlobalFlags* flags) {
  app->add_option("--coordinator", flags->coordinator,
                  "Coordinator address host:port, or several separated by commas: the one that leads is called "
                  "(else $HERD_COORDINATOR)")
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

// Each subcommand, in the order `herd --help` lists them, with its own
// arguments bound to `args`.
std::vector<std::pair<CLI::App*, Subcommand>> AddSubcommands(CLI::App* app, CliArgs* args) {
  auto add_job_id = [args](CLI::App* command) {
    command->add_option("JOB", args->job_id, "Job id")->required();
  };
  auto add_worker_id = [args](CLI::App* command) {
    command->add_option("WORKER", args->worker_id, "Worker id (see herd workers)")->required();
  };

  CLI::App* submit = app->add_subcommand("submit", "Submit the job described by a YAML file; prints its id");
  submit->add_option("FILE", args->job_file, "Job spec (YAML)")->required();
  submit->add_flag("--watch", args->watch_after_submit, "Then follow the job like `herd watch`");
  submit->add_option("--priority", args->submit_priority, "Scheduling priority (replaces the file's `priority`)")
      ->check(CLI::Range(kMinPriority, kMaxPriority));
  CLI::App* list = app->add_subcommand("list", "List jobs");
  CLI::App* status = app->add_subcommand("status", "Show one job in detail");
  add_job_id(status);
  CLI::App* watch = app->add_subcommand("watch", "Follow a job's progress until it ends (exit 0 if it succeeded)");
  add_job_id(watch);
  CLI::App* cancel = app->add_subcommand("cancel", "Cancel a job");
  add_job_id(cancel);
  CLI::App* workers = app->add_subcommand("workers", "List worker daemons");
  CLI::App* checkpoints = app->add_subcommand("checkpoints", "List a job's checkpoints");
  add_job_id(checkpoints);
  CLI::App* logs = app->add_subcommand(
      "logs", "Print a trainer's log (stdout and stderr), read through the coordinator from its worker");
  logs->add_option("JOB", args->logs.job_id, "Job id")->required();
  logs->add_option("-r,--rank", args->logs.rank, "Rank in the job's current (or last) generation")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  logs->add_flag("-f,--follow", args->logs.follow, "Keep printing new lines until that trainer exits");
  logs->add_option("--tail", args->logs.tail_lines, "Only the last N lines (0: the whole log)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI::App* fetch = app->add_subcommand(
      "fetch",
      "Download a job's trained model through the coordinator from a worker that holds it, checked against the "
      "SHA-256 the job recorded (owner or admin): DIR/JOB.safetensors (or JOB.pt), or with --checkpoint the "
      "checkpoint's files into DIR/JOB-step-N/");
  fetch->add_option("JOB", args->fetch.job_id, "Job id")->required();
  fetch->add_option("--out", args->fetch.out_dir, "Folder to write into (must exist)")->capture_default_str();
  fetch->add_option("--checkpoint", args->fetch.checkpoint_step,
                    "A recorded checkpoint's step (see herd checkpoints) instead of the final model")
      ->check(CLI::PositiveNumber);
  fetch->add_option("--format", args->fetch.format,
                    "The final model as safetensors (PyTorch, Hugging Face) or pt (a LibTorch archive)")
      ->check(CLI::IsMember({"safetensors", "pt"}))
      ->capture_default_str();
  CLI::App* resize = app->add_subcommand(
      "resize", "Change a job's worker range; a running job shrinks at its next step boundary or grows into idle workers");
  add_job_id(resize);
  resize->add_option("--min", args->resize_min, "New min_workers")->check(CLI::PositiveNumber);
  resize->add_option("--max", args->resize_max, "New max_workers")->check(CLI::PositiveNumber);
  CLI::App* priority = app->add_subcommand("priority", "Change a job's scheduling priority (higher runs first)");
  add_job_id(priority);
  priority->add_option("P", args->new_priority, "New priority")
      ->required()
      ->check(CLI::Range(kMinPriority, kMaxPriority));
  CLI::App* cordon = app->add_subcommand("cordon", "Place no new job on a worker; its running job goes on (admin)");
  add_worker_id(cordon);
  CLI::App* uncordon = app->add_subcommand("uncordon", "Let a cordoned worker take jobs again (admin)");
  add_worker_id(uncordon);
  CLI::App* drain = app->add_subcommand(
      "drain",
      "Cordon a worker and have each job it runs release it at the next step boundary: the job commits that step "
      "and goes on without it, losing nothing (admin). The daemon keeps running, cordoned; herd uncordon undoes it");
  add_worker_id(drain);
  drain->add_flag("--wait", args->drain.wait,
                  "Return once the worker has left its jobs (it is IDLE, or DEAD); prints progress to stderr");
  drain->add_option("--wait-timeout", args->drain.timeout_seconds,
                    "With --wait: give up after this many seconds, exit 1 (0: wait forever; --timeout is each call's)")
      ->default_val(300)
      ->check(CLI::NonNegativeNumber);
  return {{submit, Subcommand::kSubmit},           {list, Subcommand::kList},
          {status, Subcommand::kStatus},           {watch, Subcommand::kWatch},
          {cancel, Subcommand::kCancel},           {workers, Subcommand::kWorkers},
          {checkpoints, Subcommand::kCheckpoints}, {resize, Subcommand::kResize},
          {priority, Subcommand::kPriority},       {logs, Subcommand::kLogs},
          {fetch, Subcommand::kFetch},
          {cordon, Subcommand::kCordon},           {uncordon, Subcommand::kUncordon},
          {drain, Subcommand::kDrain}};
}

}  // namespace

std::optional<CliArgs> ParseCliArgs(int argc, const char* const* argv, const CliEnvironment& environment,
                                    int* exit_code) {
  CliArgs args;
  args.flags.coordinator = environment.coordinator.empty() ? kDefaultCoordinator : environment.coordinator;
  args.flags.token_file = environment.token_file;

  CLI::App app("herd: submit, watch and manage data-parallel training jobs.", "herd");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("herd ") + kVersion);
  AddGlobalOptions(&app, &args.flags);
  const std::vector<std::pair<CLI::App*, Subcommand>> subcommands = AddSubcommands(&app, &args);
  for (const auto& [command, unused] : subcommands) AddGlobalOptions(command, &args.flags);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, *environment.out, *environment.err);
    *exit_code = code == 0 ? kExitOk : kExitUsage;
    return std::nullopt;
  }
  for (const auto& [command, which] : subcommands) {
    if (*command) args.command = which;
  }
  if (args.command == Subcommand::kResize && args.resize_min == 0 && args.resize_max == 0) {
    *environment.err << "herd resize: give --min, --max or both\n";
    *exit_code = kExitUsage;
    return std::nullopt;
  }
  if (args.command == Subcommand::kDrain) args.drain.worker_id = args.worker_id;
  return args;
}

}  // namespace herd::client
