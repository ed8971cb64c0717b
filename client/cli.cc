#include "client/cli.h"

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "client/cli_args.h"
#include "client/commands.h"
#include "client/leader_lookup.h"
#include "common/auth.h"
#include "common/control_chars.h"
#include "common/rpc_options.h"

namespace herd::client {
namespace {

// How every subcommand calls the coordinator; the error is a usage error.
absl::StatusOr<CommandOptions> CommandOptionsFor(const GlobalFlags& flags, const CliEnvironment& environment) {
  CommandOptions options;
  options.coordinator = flags.coordinator;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_seconds * 1000));
  options.output = flags.output == "json" ? OutputFormat::kJson : OutputFormat::kTable;
  options.tty = environment.stdout_is_tty && options.output == OutputFormat::kTable;
  if (!flags.token_file.empty() && !flags.insecure_no_auth) {
    absl::StatusOr<std::string> token = ReadTokenFile(flags.token_file);
    if (!token.ok()) return token.status();
    options.token = *token;
  }
  return options;
}

int RunSubcommand(const CliArgs& args, const CommandContext& context) {
  switch (args.command) {
    case Subcommand::kSubmit:
      return SubmitCommand(context, args.job_file, args.watch_after_submit, args.submit_priority);
    case Subcommand::kList:
      return ListCommand(context);
    case Subcommand::kStatus:
      return StatusCommand(context, args.job_id);
    case Subcommand::kWatch:
      return WatchCommand(context, args.job_id);
    case Subcommand::kCancel:
      return CancelCommand(context, args.job_id);
    case Subcommand::kWorkers:
      return WorkersCommand(context);
    case Subcommand::kCheckpoints:
      return CheckpointsCommand(context, args.job_id);
    case Subcommand::kLogs:
      return LogsCommand(context, args.logs);
    case Subcommand::kFetch:
      return FetchCommand(context, args.fetch);
    case Subcommand::kResize:
      return ResizeCommand(context, args.job_id, args.resize_min, args.resize_max);
    case Subcommand::kPriority:
      return PriorityCommand(context, args.job_id, args.new_priority);
    case Subcommand::kCordon:
      return CordonCommand(context, args.worker_id, true);
    case Subcommand::kUncordon:
      return CordonCommand(context, args.worker_id, false);
    case Subcommand::kDrain:
      return DrainCommand(context, args.drain);
  }
  return kExitUsage;  // unreachable: every subcommand is handled
}

}  // namespace

int RunCli(int argc, const char* const* argv, const CliEnvironment& environment) {
  int exit_code = kExitOk;
  const std::optional<CliArgs> args = ParseCliArgs(argc, argv, environment, &exit_code);
  if (!args.has_value()) return exit_code;
  absl::StatusOr<CommandOptions> options = CommandOptionsFor(args->flags, environment);
  if (!options.ok()) {
    *environment.err << "herd: " << options.status().message() << "\n";
    return kExitUsage;
  }
  auto coordinators = LeaderChannel::Open(args->flags.coordinator, args->flags.tls);
  if (!coordinators.ok()) {
    *environment.err << "herd: --coordinator: " << coordinators.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> leader = FindLeader(**coordinators, options->timeout);
  if (!leader.ok()) {
    // The message quotes what the coordinators said: printed inert.
    *environment.err << "herd: " << EscapeControlChars(leader.status().message()) << "\n";
    return kExitUnreachable;
  }
  options->coordinator = *leader;
  std::unique_ptr<v1::JobService::Stub> stub = v1::JobService::NewStub((*coordinators)->ChannelTo(*leader));
  const CommandContext context{stub.get(), *options, environment.out, environment.err, environment.clock};
  return RunSubcommand(*args, context);
}

}  // namespace herd::client
