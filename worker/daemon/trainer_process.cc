#include "worker/daemon/trainer_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace herd::worker {
namespace {

// Signals the daemon may block or ignore; the child starts with defaults.
constexpr int kSignalsToReset[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2};

// RAII for the posix_spawn attribute objects.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
};

}  // namespace

int ExitCodeFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return -WTERMSIG(wait_status);
  return -1;
}

absl::StatusOr<std::unique_ptr<TrainerProcess>> TrainerProcess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("empty argv");
  SpawnSetup setup;
  posix_spawn_file_actions_addopen(&setup.actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&setup.actions, 1, options.log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&setup.actions, 1, 2);

  sigset_t no_signals;
  sigemptyset(&no_signals);
  sigset_t reset_signals;
  sigemptyset(&reset_signals);
  for (int signal : kSignalsToReset) sigaddset(&reset_signals, signal);
  posix_spawnattr_setflags(&setup.attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&setup.attributes, 0);  // a new group led by the child
  posix_spawnattr_setsigmask(&setup.attributes, &no_signals);
  posix_spawnattr_setsigdefault(&setup.attributes, &reset_signals);

  std::vector<char*> argv;
  argv.reserve(options.argv.size() + 1);
  for (const std::string& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  pid_t pid = 0;
  // glibc's posix_spawn reports exec and file-action failures as its result.
  int error = posix_spawn(&pid, argv[0], &setup.actions, &setup.attributes, argv.data(), environ);
  if (error != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start ", options.argv[0], ": ", std::strerror(error)));
  }
  return std::unique_ptr<TrainerProcess>(new TrainerProcess(pid));
}

TrainerProcess::~TrainerProcess() {
  if (exit_code_.has_value()) return;
  Signal(SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void TrainerProcess::Signal(int signal) {
  if (exit_code_.has_value()) return;
  // The child leads its own group (pgid == pid) from the moment it exists.
  kill(-pid_, signal);
}

void TrainerProcess::BeginStop(std::chrono::milliseconds grace) {
  if (exit_code_.has_value() || kill_deadline_.has_value()) return;
  kill_deadline_ = std::chrono::steady_clock::now() + grace;
  Signal(SIGTERM);
}

std::optional<int> TrainerProcess::Poll() {
  if (exit_code_.has_value()) return exit_code_;
  int status = 0;
  pid_t result = waitpid(pid_, &status, WNOHANG);
  if (result == pid_) {
    // Helpers the trainer left behind in its group go with it. The group id
    // cannot be reused while any member lives, so this reaches only them.
    kill(-pid_, SIGKILL);
    exit_code_ = ExitCodeFromWaitStatus(status);
    return exit_code_;
  }
  if (result < 0 && errno == ECHILD) {
    exit_code_ = -1;  // reaped elsewhere; the status is lost
    return exit_code_;
  }
  if (kill_deadline_.has_value() && !killed_ && std::chrono::steady_clock::now() >= *kill_deadline_) {
    killed_ = true;
    Signal(SIGKILL);
  }
  return std::nullopt;
}

int TrainerProcess::Stop(std::chrono::milliseconds grace) {
  BeginStop(grace);
  while (true) {
    if (auto code = Poll()) return *code;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace herd::worker
