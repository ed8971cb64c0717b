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

}  // namespace herd::worker
