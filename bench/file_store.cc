#include "bench/file_store.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace herd::bench {

std::string FileStore::PathFor(const std::string& key) const {
  // Keys hold '/' and other characters a file name cannot: hex-escape them.
  std::string name;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      name.push_back(static_cast<char>(c));
    } else {
      char escaped[4];
      std::snprintf(escaped, sizeof(escaped), "%%%02x", c);
      name += escaped;
    }
  }
  return absl::StrCat(directory_, "/", name);
}

absl::Status FileStore::Set(const std::string& key, const std::string& value) {
  const std::string path = PathFor(key);
  return WriteFileAtomically(path, value);
}

absl::Status FileStore::Get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) {
  const std::string path = PathFor(key);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::stringstream contents;
      contents << in.rdbuf();
      *value = contents.str();
      return absl::OkStatus();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("key '", key, "' did not appear within ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace herd::bench
