// Exponential retry delays: doubles from `initial` up to `max`.
#pragma once

#include <algorithm>
#include <chrono>

namespace herd::worker {

class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max) : initial_(initial), max_(max) {}

  // The delay before the next retry; each call doubles the following one.
  std::chrono::milliseconds Next() {
    std::chrono::milliseconds delay = std::min(next_.count() == 0 ? initial_ : next_, max_);
    next_ = std::min(delay * 2, max_);
    return delay;
  }

  void Reset() { next_ = std::chrono::milliseconds(0); }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds max_;
  std::chrono::milliseconds next_{0};
};

// How long to wait before retrying a coordinator that holds this worker's
// lease: the backoff's `delay`, capped at a quarter of the lease, so that
// several retries land before the lease runs out and a restarted coordinator
// hears from its members in time; never below `floor` (a short lease must
// not turn retries into a busy loop). No lease yet (0): `delay` as it is.
inline std::chrono::milliseconds RetryDelayWithinLease(std::chrono::milliseconds delay,
                                                       std::chrono::milliseconds lease,
                                                       std::chrono::milliseconds floor) {
  if (lease.count() <= 0) return delay;
  return std::max(floor, std::min(delay, lease / 4));
}

}  // namespace herd::worker
