#include "bench/fork_ranks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"

namespace herd::bench {

absl::Status RunRankProcesses(int world, const std::function<int(int rank)>& body) {
  std::fflush(nullptr);  // or the children print the parent's buffered output again
  std::vector<pid_t> children;
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = fork();
    if (pid < 0) {
      for (pid_t child : children) kill(child, SIGKILL);
      return absl::InternalError("fork failed");
    }
    if (pid == 0) {
      int code = body(rank);
      std::fflush(nullptr);
      _exit(code);  // skip the parent's atexit handlers and static destructors
    }
    children.push_back(pid);
  }
  absl::Status result;
  for (size_t left = children.size(); left > 0; --left) {
    int status = 0;
    pid_t pid = wait(&status);
    if (pid < 0) break;
    if (std::find(children.begin(), children.end(), pid) == children.end()) {
      ++left;  // not a rank: someone else's child
      continue;
    }
    const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!clean && result.ok()) {
      int rank = 0;
      while (rank < world && children[rank] != pid) ++rank;
      result = absl::InternalError(absl::StrCat(
          "rank ", rank, " failed (",
          WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status)) : absl::StrCat("signal ", WTERMSIG(status)),
          ")"));
      for (pid_t child : children) {
        if (child != pid) kill(child, SIGKILL);
      }
    }
  }
  return result;
}

}  // namespace herd::bench
