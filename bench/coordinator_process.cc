#include "bench/coordinator_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"

namespace herd::bench {
namespace {

// Parses the ready file once it is complete (the coordinator renames it into
// place) and says it leads (a coordinator on etcd writes it first as a
// standby, with "leading": false).
absl::StatusOr<std::string> ReadListenAddress(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(path);
  try {
    nlohmann::json ready = nlohmann::json::parse(in);
    if (!ready.value("leading", true)) return absl::UnavailableError(absl::StrCat(path, ": not leading yet"));
    return ready.at("listen").get<std::string>();
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("ready file ", path, ": ", e.what()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Start(
    const CoordinatorProcessOptions& options) {
  if (access(options.binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("no herd-coordinator binary at '", options.binary, "' (pass --coordinator)"));
  }
  const std::string ready = options.directory + "/ready.json";
  const std::string log = options.directory + "/coordinator.log";
  std::vector<std::string> args = {options.binary,
                                   "--insecure-no-auth",
                                   "--listen=127.0.0.1:0",
                                   "--metrics-listen=127.0.0.1:0",  // never collide with another coordinator
                                   options.store.empty() ? "--state-dir=" + options.directory + "/state"
                                                         : "--store=" + options.store,
                                   absl::StrCat("--lease-seconds=", options.lease_seconds),
                                   "--ready-file=" + ready};
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::unique_ptr<CoordinatorProcess> process(new CoordinatorProcess(pid, log));
  const auto deadline = std::chrono::steady_clock::now() + options.ready_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto address = ReadListenAddress(ready);
    if (address.ok()) {
      process->address_ = *address;
      return process;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process->exited_ = true;
      return absl::UnavailableError(absl::StrCat("herd-coordinator exited before serving; see ", log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("herd-coordinator not ready after ", options.ready_timeout.count(), " s; see ", log));
}

CoordinatorProcess::~CoordinatorProcess() {
  if (exited_) return;
  if (!Stop().ok()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

absl::StatusOr<int> CoordinatorProcess::Stop(std::chrono::seconds timeout) {
  if (exited_) return absl::FailedPreconditionError("already stopped");
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError("herd-coordinator did not stop after SIGTERM");
}

absl::StatusOr<int64_t> CoordinatorProcess::StatusField(const std::string& field) const {
  std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size()));  // "VmRSS:  1234 kB"
  }
  return absl::NotFoundError(absl::StrCat(field, " not in /proc/", pid_, "/status"));
}

}  // namespace herd::bench
