#include "tests/harness/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace herd::testing {
namespace {

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int out_fd, int err_fd) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  setpgid(0, 0);  // own group: a test kills the process and its children
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  for (const auto& e : env) putenv(strdup(e.c_str()));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  fprintf(stderr, "exec %s: %s\n", args[0], strerror(errno));
  _exit(127);
}

std::optional<int> WaitPid(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return DecodeStatus(status);
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

Process::Process(std::vector<std::string> argv, std::string log_path, std::vector<std::string> env)
    : log_path_(std::move(log_path)) {
  int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_ = Spawn(argv, env, fd, fd);
  close(fd);
}

Process::~Process() {
  if (pid_ > 0 && !exit_code_) {
    kill(-pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
}

void Process::Signal(int signal) {
  if (pid_ > 0 && !exit_code_) kill(-pid_, signal);
}

std::optional<int> Process::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  exit_code_ = WaitPid(pid_, timeout);
  return exit_code_;
}

bool Process::Running() { return !Wait(std::chrono::milliseconds(0)).has_value(); }

std::string Process::Log() const { return ReadFile(log_path_); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         const std::vector<std::string>& env) {
  char out_template[] = "/tmp/herd-cmd-out.XXXXXX";
  char err_template[] = "/tmp/herd-cmd-err.XXXXXX";
  int out_fd = mkstemp(out_template);
  int err_fd = mkstemp(err_template);
  pid_t pid = Spawn(argv, env, out_fd, err_fd);
  close(out_fd);
  close(err_fd);
  CommandResult result;
  auto code = WaitPid(pid, timeout);
  if (!code) {
    kill(-pid, SIGKILL);
    code = WaitPid(pid, std::chrono::seconds(10));
    result.err = "[timed out]\n";
  }
  result.exit_code = code.value_or(-1);
  result.out = ReadFile(out_template);
  result.err += ReadFile(err_template);
  unlink(out_template);
  unlink(err_template);
  return result;
}

bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path);
    if (in && in.peek() != std::ifstream::traits_type::eof()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace herd::testing
