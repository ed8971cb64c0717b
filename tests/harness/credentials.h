// Credentials for a test cluster: an auth file with two users, an admin, a
// worker principal scoped to the harness's worker ids and one scoped to
// other ids, and one private (0600) token file per principal.
#pragma once

#include <string>

namespace herd::testing {

struct TestCredentials {
  std::string auth_file;
  std::string user_token_file;        // principal "alice", role user
  std::string other_user_token_file;  // principal "bob", role user
  std::string admin_token_file;       // principal "ops", role admin
  std::string worker_token_file;      // principal "workers", role worker, ids worker-*
  std::string outside_worker_token_file;  // principal "outsiders", role worker, ids outside-*
};

// The harness's worker ids are "worker-N"; this is the worker principal's scope.
inline constexpr char kTestWorkerIds[] = "worker-*";

// Writes the files into `dir` with fresh random tokens.
TestCredentials WriteTestCredentials(const std::string& dir);

// Writes `content` to `path` with mode 0600 (token and auth files must be
// private to be accepted).
void WritePrivateFile(const std::string& path, const std::string& content);

}  // namespace herd::testing
