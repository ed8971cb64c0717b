// The `herd` command line: its subcommands, flags and help text, parsed into
// one CliArgs. Running the chosen subcommand is cli.cc's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "client/cli.h"
#include "client/commands.h"
#include "common/rpc_options.h"

namespace herd::client {

// The options every subcommand takes.
struct GlobalFlags {
  std::string coordinator;
  std::string token_file;
  bool insecure_no_auth = false;
  TlsOptions tls;
  double timeout_seconds = 10;
  std::string output = "table";
};

enum class Subcommand {
  kSubmit,
  kList,
  kStatus,
  kWatch,
  kCancel,
  kWorkers,
  kCheckpoints,
  kLogs,
  kFetch,
  kResize,
  kPriority,
  kCordon,
  kUncordon,
  kDrain,
};

struct CliArgs {
  GlobalFlags flags;
  Subcommand command = Subcommand::kList;
  std::string job_id;     // the subcommands about one job
  std::string worker_id;  // cordon, uncordon, drain
  // submit
  std::string job_file;
  bool watch_after_submit = false;
  std::optional<int64_t> submit_priority;
  LogsOptions logs;
  FetchOptions fetch;
  // resize: 0 leaves that bound as it is
  int64_t resize_min = 0;
  int64_t resize_max = 0;
  int64_t new_priority = 0;  // priority
  DrainOptions drain;        // drain (its worker_id is set)
};

// Parses argv (defaults from `environment`'s $HERD_COORDINATOR and
// $HERD_TOKEN_FILE). Returns nullopt when herd exits now with `*exit_code`
// (kExitOk after --help or --version, kExitUsage after a usage error), with
// what to say already written to the environment's streams.
std::optional<CliArgs> ParseCliArgs(int argc, const char* const* argv, const CliEnvironment& environment,
                                    int* exit_code);

}  // namespace herd::client
