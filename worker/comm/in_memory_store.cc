#include "worker/comm/in_memory_store.h"

#include "absl/strings/str_cat.h"

namespace herd {

absl::Status InMemoryStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status InMemoryStore::Get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool found = changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; });
  if (!found) {
    return absl::DeadlineExceededError(
        absl::StrCat("key '", key, "' did not appear within ", timeout.count(), " ms"));
  }
  *value = values_.at(key);
  return absl::OkStatus();
}

}  // namespace herd
