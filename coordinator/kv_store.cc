#include "coordinator/kv_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/await_answer.h"

namespace herd::coordinator {
namespace {

void Deliver(std::vector<std::pair<KvStore::GetDone, absl::Status>>& failed) {
  for (auto& [done, status] : failed) done(std::move(status));
}

// Each woken Get gets its copy of `value`, made outside the store's lock.
void Deliver(std::vector<KvStore::GetDone>& woken, const std::string& value) {
  for (KvStore::GetDone& done : woken) done(value);
}

absl::Status NotSet(const std::string& key, const std::string& job_id, int64_t generation) {
  return absl::DeadlineExceededError(
      absl::StrCat("kv key '", key, "' of job ", job_id, " generation ", generation, " is not set"));
}

}  // namespace

KvStore::KvStore(KvLimits limits, const Clock* clock)
    : limits_(limits), deadlines_([this](std::vector<WaitId> due) { Expire(due); }, clock) {}

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

absl::Status KvStore::Put(const Scope& scope, const std::string& key, std::string value,
                          std::vector<GetDone>* woken) {
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
  auto waiting = getting_.find({scope, key});
  if (waiting != getting_.end()) {
    const absl::flat_hash_set<WaitId> ids = waiting->second;
    for (WaitId id : ids) woken->push_back(RemoveGetter(id).done);
  }
  return absl::OkStatus();
}

KvStore::Getter KvStore::RemoveGetter(WaitId id) {
  auto it = getters_.find(id);
  Getter getter = std::move(it->second);
  getters_.erase(it);
  auto waiting = getting_.find({getter.scope, getter.key});
  waiting->second.erase(id);
  if (waiting->second.empty()) getting_.erase(waiting);
  deadlines_.Remove(id, getter.deadline);
  return getter;
}

absl::Status KvStore::Set(const std::string& job_id, int64_t generation, const std::string& key, std::string value) {
  if (auto status = CheckKey(key); !status.ok()) return status;
  if (value.size() > limits_.max_value_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv value is ", value.size(), " bytes; the limit is ", limits_.max_value_bytes));
  }
  Scope scope{job_id, generation};
  std::vector<GetDone> woken;
  {
    absl::MutexLock lock(&mu_);
    if (auto status = CheckDropped(scope); !status.ok()) return status;
    // Most keys nobody waits for: the value moves in. Woken Gets copy it
    // once the lock is released.
    const bool awaited = getting_.count({scope, key}) > 0;
    if (auto status = Put(scope, key, awaited ? value : std::move(value), &woken); !status.ok()) return status;
  }
  Deliver(woken, value);
  return absl::OkStatus();
}

KvStore::WaitId KvStore::StartGet(const std::string& job_id, int64_t generation, const std::string& key,
                                  absl::Duration wait, GetDone done) {
  if (auto status = CheckKey(key); !status.ok()) {
    done(std::move(status));
    return 0;
  }
  absl::StatusOr<std::string> answer;
  {
    const Scope scope{job_id, generation};
    absl::MutexLock lock(&mu_);
    auto entries = scopes_.find(scope);
    if (auto status = CheckDropped(scope); !status.ok()) {
      answer = status;
    } else if (entries != scopes_.end() && entries->second.entries.count(key) > 0) {
      answer = entries->second.entries.at(key);
    } else if (wait <= absl::ZeroDuration()) {
      answer = NotSet(key, job_id, generation);
    } else {
      const WaitId id = next_id_++;
      const double deadline = deadlines_.DeadlineIn(std::min(wait, limits_.max_wait));
      deadlines_.Add(id, deadline);
      getting_[{scope, key}].insert(id);
      getters_.emplace(id, Getter{scope, key, deadline, std::move(done)});
      return id;
    }
  }
  done(std::move(answer));
  return 0;
}

void KvStore::CancelGet(WaitId id) {
  GetDone done;
  {
    absl::MutexLock lock(&mu_);
    if (!getters_.contains(id)) return;  // answered already
    done = RemoveGetter(id).done;
  }
  done(absl::CancelledError("the caller cancelled the kv wait"));
}

void KvStore::Expire(const std::vector<WaitId>& ids) {
  std::vector<std::pair<GetDone, absl::Status>> failed;
  {
    absl::MutexLock lock(&mu_);
    for (WaitId id : ids) {
      if (!getters_.contains(id)) continue;  // answered meanwhile
      Getter getter = RemoveGetter(id);
      failed.emplace_back(std::move(getter.done), NotSet(getter.key, getter.scope.first, getter.scope.second));
    }
  }
  Deliver(failed);
}

absl::StatusOr<std::string> KvStore::Get(const std::string& job_id, int64_t generation, const std::string& key,
                                         absl::Duration wait, const std::function<bool()>& cancelled) {
  return AwaitAnswer<std::string>(
      [&](GetDone done) { return StartGet(job_id, generation, key, wait, std::move(done)); },
      [this](WaitId id) { CancelGet(id); }, limits_.cancel_poll, cancelled);
}

size_t KvStore::Waiting() const {
  absl::MutexLock lock(&mu_);
  return getters_.size();
}

bool KvStore::AwaitWaiting(size_t count, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return getters_.size() == count; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

absl::StatusOr<int64_t> KvStore::Add(const std::string& job_id, int64_t generation, const std::string& key,
                                     int64_t delta) {
  if (auto status = CheckKey(key); !status.ok()) return status;
  const Scope scope{job_id, generation};
  int64_t value = 0;
  std::vector<GetDone> woken;
  {
    absl::MutexLock lock(&mu_);
    if (auto status = CheckDropped(scope); !status.ok()) return status;
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
    if (auto status = Put(scope, key, absl::StrCat(value), &woken); !status.ok()) return status;
  }
  Deliver(woken, absl::StrCat(value));
  return value;
}

void KvStore::DropGenerationsBefore(const std::string& job_id, int64_t first_live) {
  std::vector<std::pair<GetDone, absl::Status>> failed;
  {
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
    // Gets waiting in a dropped generation hear that it is no longer current.
    std::vector<WaitId> fenced;
    for (auto it = getting_.lower_bound({{job_id, INT64_MIN}, ""});
         it != getting_.end() && it->first.first.first == job_id && it->first.first.second < fence; ++it) {
      fenced.insert(fenced.end(), it->second.begin(), it->second.end());
    }
    for (WaitId id : fenced) {
      Getter getter = RemoveGetter(id);
      failed.emplace_back(std::move(getter.done), CheckDropped(getter.scope));
    }
  }
  Deliver(failed);
}

void KvStore::Shutdown() {
  std::vector<std::pair<GetDone, absl::Status>> failed;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    while (!getters_.empty()) {
      failed.emplace_back(RemoveGetter(getters_.begin()->first).done,
                          absl::UnavailableError("coordinator is shutting down"));
    }
  }
  Deliver(failed);
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
