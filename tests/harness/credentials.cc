#include "tests/harness/credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <stdexcept>

#include "common/sha256.h"

namespace herd::testing {
namespace {

std::string RandomToken(const std::string& label) {
  std::random_device random;
  std::string token = label + "-";
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token += kHex[random() % 16];
  return token;
}

}  // namespace

void WritePrivateFile(const std::string& path, const std::string& content) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw std::runtime_error("cannot write " + path);
  fchmod(fd, 0600);  // also when it existed with another mode
  const ssize_t written = write(fd, content.data(), content.size());
  close(fd);
  if (written != static_cast<ssize_t>(content.size())) throw std::runtime_error("short write to " + path);
}

TestCredentials WriteTestCredentials(const std::string& dir) {
  TestCredentials files{dir + "/auth", dir + "/user-token", dir + "/other-user-token", dir + "/admin-token",
                        dir + "/worker-token", dir + "/outside-worker-token"};
  struct Entry {
    const char* principal;
    const char* role;
    std::string token_file;
    std::string worker_ids;
  };
  const Entry entries[] = {
      {"alice", "user", files.user_token_file, ""},
      {"bob", "user", files.other_user_token_file, ""},
      {"ops", "admin", files.admin_token_file, ""},
      {"workers", "worker", files.worker_token_file, kTestWorkerIds},
      {"outsiders", "worker", files.outside_worker_token_file, "outside-*"},
  };
  std::string auth = "# test cluster: PRINCIPAL ROLE CREDENTIAL [WORKER-IDS]\n";
  for (const Entry& entry : entries) {
    const std::string token = RandomToken(entry.principal);
    WritePrivateFile(entry.token_file, token + "\n");
    auth += std::string(entry.principal) + " " + entry.role + " sha256:" + Sha256Hex(token) + " " +
            entry.worker_ids + "\n";
  }
  WritePrivateFile(files.auth_file, auth);
  return files;
}

}  // namespace herd::testing
