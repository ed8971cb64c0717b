// Child processes for multi-process tests: real binaries, real signals.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace herd::testing {

class Process {
 public:
  // Starts `argv` with stdout and stderr appended to `log_path`; extra
  // environment entries ("NAME=value") are added to the parent's.
  Process(std::vector<std::string> argv, std::string log_path, std::vector<std::string> env = {});
  ~Process();  // SIGKILLs the process group if still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  void Signal(int signal);
  // Exit code (negative signal number if killed), or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  bool Running();
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  std::string log_path_;
  std::optional<int> exit_code_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs a command to completion (killed after `timeout`) and captures output.
CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         const std::vector<std::string>& env = {});

// Waits until `path` exists and is non-empty; false on timeout.
bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout);

std::string ReadFile(const std::string& path);

}  // namespace herd::testing
