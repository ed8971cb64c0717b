// herd: the command-line client. Everything but the process surroundings is
// in cli.cc and cli_args.cc (the command line).
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "client/cli.h"
#include "common/clock.h"

namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

}  // namespace

int main(int argc, char** argv) {
  herd::SystemClock clock;
  herd::client::CliEnvironment environment;
  environment.out = &std::cout;
  environment.err = &std::cerr;
  environment.coordinator = Env("HERD_COORDINATOR");
  environment.token_file = Env("HERD_TOKEN_FILE");
  environment.stdout_is_tty = isatty(STDOUT_FILENO) != 0;
  environment.clock = &clock;
  return herd::client::RunCli(argc, argv, environment);
}
