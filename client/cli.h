// The `herd` command line: parses it and runs the chosen subcommand.
#pragma once

#include <ostream>
#include <string>

#include "common/clock.h"

namespace herd::client {

// What the CLI takes from its surroundings, so tests can supply their own.
struct CliEnvironment {
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  std::string coordinator;  // $HERD_COORDINATOR
  std::string token_file;   // $HERD_TOKEN_FILE
  bool stdout_is_tty = false;
  const Clock* clock = nullptr;
};

// Returns the process exit code (see ExitCode in commands.h).
int RunCli(int argc, const char* const* argv, const CliEnvironment& environment);

}  // namespace herd::client
