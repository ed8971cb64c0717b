#include "coordinator/kv_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace herd::coordinator {

absl::Status KvStore::CheckKey(const std::string& key) const {
  if (key.empty()) return absl::InvalidArgumentError("kv key is empty");
  if (key.size() > limits_.max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv key is ", key.size(), " bytes; the limit is ", limits_.max_key_bytes));
  }
  return absl::OkStatus();
}

absl::Status KvStore::CheckDropped(const Scope& scope) const {
  if (shutting_down_) return absl::UnavailableError("coordinator is shutting down");
  auto it = first_live_generation_.find(scope.first);
  if (it != first_live_generation_.end() && scope.second < it->second) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", scope.first, ": generation ", scope.second, " is no longer current"));
  }
  return absl::OkStatus();
}

absl::Status KvStore::Put(const Scope& scope, const std::string& key, std::string value) {
  ScopeEntries& scope_entries = scopes_[scope];
  auto& entries = scope_entries.entries;
  auto it = entries.find(key);
  const size_t old_bytes = it == entries.end() ? 0 : key.size() + it->second.size();
  const size_t new_bytes = key.size() + value.size();
  if (it == entries.end() && entries.size() >= limits_.max_keys_per_generation) {
    return absl::ResourceExhaustedError(absl::StrCat("kv store of job ", scope.first, " generation ", scope.second,
                                                     " already holds ", limits_.max_keys_per_generation, " keys"));
  }
  if (new_bytes > old_bytes) {
    const size_t growth = new_bytes - old_bytes;
    if (scope_entries.bytes + growth > limits_.max_bytes_per_generation) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "kv store of job ", scope.first, " generation ", scope.second, " holds ", scope_entries.bytes,
          " bytes; this write needs ", growth, " more and the limit is ", limits_.max_bytes_per_generation,
          " bytes per generation (herd-coordinator --kv-max-generation-bytes)"));
    }
    if (total_bytes_ + growth > limits_.max_bytes_total) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "kv store holds ", total_bytes_, " bytes over all jobs; this write needs ", growth,
          " more and the limit is ", limits_.max_bytes_total, " bytes (herd-coordinator --kv-max-total-bytes)"));
    }
  }
  scope_entries.bytes = scope_entries.bytes - old_bytes + new_bytes;
  total_bytes_ = total_bytes_ - old_bytes + new_bytes;
  if (it != entries.end()) {
    it->second = std::move(value);
  } else {
    entries.emplace(key, std::move(value));
  }
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status KvStore::Set(const std::string& job_id, int64_t generation, const std::string& key, std::string value) {
  if (auto status = CheckKey(key); !status.ok()) return status;
  if (value.size() > limits_.max_value_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv value is ", value.size(), " bytes; the limit is ", limits_.max_value_bytes));
  }
  Scope scope{job_id, generation};
  absl::MutexLock lock(&mu_);
  if (auto status = CheckDropped(scope); !status.ok()) return status;
  return Put(scope, key, std::move(value));
}

absl::StatusOr<std::string> KvStore::Get(const std::string& job_id, int64_t generation, const std::string& key,
                                         absl::Duration wait, const std::function<bool()>& cancelled) {
  if (auto status = CheckKey(key); !status.ok()) return status;
  const Scope scope{job_id, generation};
  const absl::Time deadline = absl::Now() + std::clamp(wait, absl::ZeroDuration(), limits_.max_wait);
  absl::MutexLock lock(&mu_);
  while (true) {
    if (auto status = CheckDropped(scope); !status.ok()) return status;
    auto entries = scopes_.find(scope);
    if (entries != scopes_.end()) {
      auto it = entries->second.entries.find(key);
      if (it != entries->second.entries.end()) return it->second;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("kv key '", key, "' of job ", job_id, " generation ", generation, " is not set"));
    }
    if (cancelled && cancelled()) return absl::CancelledError("the caller cancelled the kv wait");
    changed_.WaitWithDeadline(&mu_, std::min(deadline, now + limits_.cancel_poll));
  }
}

absl::StatusOr<int64_t> KvStore::Add(const std::string& job_id, int64_t generation, const std::string& key,
                                     int64_t delta) {
  if (auto status = CheckKey(key); !status.ok()) return status;
  const Scope scope{job_id, generation};
  absl::MutexLock lock(&mu_);
  if (auto status = CheckDropped(scope); !status.ok()) return status;
  int64_t value = 0;
  auto entries = scopes_.find(scope);
  if (entries != scopes_.end()) {
    auto it = entries->second.entries.find(key);
    if (it != entries->second.entries.end() && !absl::SimpleAtoi(it->second, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("kv key '", key, "' does not hold an integer counter"));
    }
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    return absl::OutOfRangeError(absl::StrCat("kv counter '", key, "' would overflow"));
  }
  if (auto status = Put(scope, key, absl::StrCat(value)); !status.ok()) return status;
  return value;
}

void KvStore::DropGenerationsBefore(const std::string& job_id, int64_t first_live) {
  absl::MutexLock lock(&mu_);
  int64_t& fence = first_live_generation_[job_id];
  fence = std::max(fence, first_live);
  for (auto it = scopes_.lower_bound({job_id, INT64_MIN}); it != scopes_.end() && it->first.first == job_id;) {
    if (it->first.second < fence) {
      total_bytes_ -= it->second.bytes;
      it = scopes_.erase(it);
    } else {
      it = std::next(it);
    }
  }
  changed_.SignalAll();
}

void KvStore::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  changed_.SignalAll();
}

size_t KvStore::KeyCount(const std::string& job_id, int64_t generation) const {
  absl::MutexLock lock(&mu_);
  auto it = scopes_.find({job_id, generation});
  return it == scopes_.end() ? 0 : it->second.entries.size();
}

size_t KvStore::ByteCount(const std::string& job_id, int64_t generation) const {
  absl::MutexLock lock(&mu_);
  auto it = scopes_.find({job_id, generation});
  return it == scopes_.end() ? 0 : it->second.bytes;
}

size_t KvStore::TotalBytes() const {
  absl::MutexLock lock(&mu_);
  return total_bytes_;
}

}  // namespace herd::coordinator
