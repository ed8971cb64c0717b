// A small in-memory key-value store for collective bootstrap (NCCL unique
// ids, Gloo addresses, barriers). Keys live in one scope per (job,
// generation); a scope disappears when its generation stops being current.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/deadline_timer.h"

namespace herd::coordinator {

struct KvLimits {
  size_t max_key_bytes = 512;
  size_t max_value_bytes = 1 << 20;
  size_t max_keys_per_generation = 10000;
  // Byte budgets (keys plus values): rendezvous needs a few KiB per
  // generation, so these only stop a member from filling the coordinator's
  // memory. Writes past either are RESOURCE_EXHAUSTED naming the limit.
  size_t max_bytes_per_generation = 16 << 20;
  size_t max_bytes_total = 256 << 20;
  absl::Duration max_wait = absl::Seconds(120);
  // How often a blocking Get (in-process callers) asks whether its caller
  // gave up; gRPC's KvGet waits without a thread and hears it at once.
  absl::Duration cancel_poll = absl::Milliseconds(250);
};

class KvStore {
 public:
  using WaitId = uint64_t;
  // A Get's answer; called exactly once, never under the store's lock.
  using GetDone = absl::AnyInvocable<void(absl::StatusOr<std::string>)>;

  // `clock` (seconds; nullptr: a monotonic clock): the waits' deadlines.
  explicit KvStore(KvLimits limits = {}, const Clock* clock = nullptr);

  absl::Status Set(const std::string& job_id, int64_t generation, const std::string& key, std::string value);

  // Waits up to `wait` (capped at limits.max_wait) for the key to appear,
  // holding no thread: `done` gets its value, DEADLINE_EXCEEDED when it is
  // still absent, FAILED_PRECONDITION when the generation is dropped
  // meanwhile, CANCELLED on CancelGet, UNAVAILABLE at shutdown. What is
  // known at once is given before this returns. Returns the id for
  // CancelGet (0: answered already).
  WaitId StartGet(const std::string& job_id, int64_t generation, const std::string& key, absl::Duration wait,
                  GetDone done);
  void CancelGet(WaitId id);
  // StartGet, blocking the calling thread (in-process callers and tests);
  // CANCELLED once `cancelled` returns true (asked every limits.cancel_poll).
  absl::StatusOr<std::string> Get(const std::string& job_id, int64_t generation, const std::string& key,
                                  absl::Duration wait, const std::function<bool()>& cancelled = nullptr);
  // Gets still waiting. AwaitWaiting: true once exactly `count` wait,
  // false after `timeout` (tests). FireDeadlines: see JoinBoard.
  size_t Waiting() const;
  bool AwaitWaiting(size_t count, absl::Duration timeout) const;
  void FireDeadlines() { deadlines_.FireDue(); }

  // Atomically adds `delta` to the counter at `key` (absent counts as 0; the
  // value is stored as a decimal string) and returns the new value.
  absl::StatusOr<int64_t> Add(const std::string& job_id, int64_t generation, const std::string& key, int64_t delta);

  // Removes the scopes of `job_id` below `first_live` and fences later calls
  // for them. Pass INT64_MAX once the job is final.
  void DropGenerationsBefore(const std::string& job_id, int64_t first_live);

  // Wakes every waiter with UNAVAILABLE; later waits fail at once.
  void Shutdown();

  size_t KeyCount(const std::string& job_id, int64_t generation) const;
  // Bytes (keys plus values) held: in one generation, and in all.
  size_t ByteCount(const std::string& job_id, int64_t generation) const;
  size_t TotalBytes() const;

 private:
  using Scope = std::pair<std::string, int64_t>;

  absl::Status CheckKey(const std::string& key) const;
  absl::Status CheckDropped(const Scope& scope) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Get waiting for its key.
  struct Getter {
    Scope scope;
    std::string key;
    double deadline = 0;
    GetDone done;
  };
  // Stores `value`, enforcing the per-generation key limit for new keys and
  // both byte budgets; the Gets waiting for the key move to `*woken`.
  absl::Status Put(const Scope& scope, const std::string& key, std::string value, std::vector<GetDone>* woken)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Getter RemoveGetter(WaitId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deadlines came: those still waiting answer DEADLINE_EXCEEDED.
  void Expire(const std::vector<WaitId>& ids) ABSL_LOCKS_EXCLUDED(mu_);

  const KvLimits limits_;
  mutable absl::Mutex mu_;
  struct ScopeEntries {
    std::map<std::string, std::string> entries;
    size_t bytes = 0;
  };
  std::map<Scope, ScopeEntries> scopes_ ABSL_GUARDED_BY(mu_);
  size_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Per job: generations below this were dropped; their calls are fenced.
  std::map<std::string, int64_t> first_live_generation_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  WaitId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<WaitId, Getter> getters_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<Scope, std::string>, absl::flat_hash_set<WaitId>> getting_ ABSL_GUARDED_BY(mu_);  // by key
  DeadlineTimer deadlines_;  // last: its thread ends first
};

}  // namespace herd::coordinator
