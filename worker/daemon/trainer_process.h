// One child process in its own process group: spawn, signal, reap. The group
// matters because a trainer may start helpers; signals must reach them all.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd::worker {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the executable's path
  std::string log_path;           // stdout and stderr are appended here
};

// The exit code herd reports: the exit status, or -N when killed by signal N.
int ExitCodeFromWaitStatus(int wait_status);

class TrainerProcess {
 public:
  // Starts the child without waiting for it. Fails when the log cannot be
  // opened or the executable cannot be run.
  static absl::StatusOr<std::unique_ptr<TrainerProcess>> Spawn(const SpawnOptions& options);

  TrainerProcess(const TrainerProcess&) = delete;
  TrainerProcess& operator=(const TrainerProcess&) = delete;
  // Kills and reaps a group still running: never leaves an orphan or zombie.
  ~TrainerProcess();

  pid_t pid() const { return pid_; }
  bool stopping() const { return kill_deadline_.has_value(); }

  // Sends `signal` to the whole group (no-op once reaped).
  void Signal(int signal);

  // SIGTERM now; a later Poll() past `grace` escalates to SIGKILL.
  void BeginStop(std::chrono::milliseconds grace);

  // Non-blocking: reaps the child if it has exited (then SIGKILLs whatever
  // is left of its group) and escalates a stop whose grace ran out. Returns
  // the exit code once the child is gone.
  std::optional<int> Poll();

  // Blocking: BeginStop(grace), then Poll() until the child is gone.
  int Stop(std::chrono::milliseconds grace);

  std::optional<int> exit_code() const { return exit_code_; }

 private:
  explicit TrainerProcess(pid_t pid) : pid_(pid) {}

  pid_t pid_;
  std::optional<int> exit_code_;
  std::optional<std::chrono::steady_clock::time_point> kill_deadline_;
  bool killed_ = false;
};

}  // namespace herd::worker
