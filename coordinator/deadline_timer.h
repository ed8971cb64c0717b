// The deadlines of waits that hold no thread (join board, KV store): one
// thread sleeps until the earliest is due and hands the due ids to their
// owner, which answers those still waiting.
#pragma once

#include <cstdint>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace herd::coordinator {

class DeadlineTimer {
 public:
  // `expire(ids)` runs on the timer's thread (or FireDue's caller), without
  // the timer's lock, with the ids whose deadline `clock` (seconds; nullptr:
  // a monotonic clock, which must outlive the timer) has reached.
  explicit DeadlineTimer(absl::AnyInvocable<void(std::vector<uint64_t>)> expire, const Clock* clock = nullptr);
  ~DeadlineTimer();  // the thread ends; no expire runs after this returns
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // The deadline `wait` from now; what Add and Remove take.
  double DeadlineIn(absl::Duration wait) const { return clock_->Now() + absl::ToDoubleSeconds(wait); }
  void Add(uint64_t id, double deadline) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(uint64_t id, double deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Expires what is due now. The thread does this at each deadline; tests
  // that move a fake clock call it themselves.
  void FireDue() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Takes the due ids out.
  std::vector<uint64_t> TakeDue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run();

  absl::AnyInvocable<void(std::vector<uint64_t>)> expire_;
  MonotonicClock monotonic_;
  const Clock* const clock_;
  absl::Mutex mu_;
  absl::CondVar earlier_;  // an earlier deadline, or stopping
  std::set<std::pair<double, uint64_t>> deadlines_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace herd::coordinator
