// Store writes in the order the coordinator made its changes, although they
// run after the state lock is released: each change takes a ticket while the
// lock is held, and a write runs only once every earlier ticket's has, so a
// later write never lands before an earlier one. One write at a time: the
// stores are not thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace herd::coordinator {

class WriteTurns {
 public:
  // The next ticket; never waits. Take it under the lock that orders the
  // changes; every ticket taken must be run (RunInTurn), or later ones wait
  // forever.
  int64_t Take();

  // Runs `write` once every earlier ticket has run, then lets the next go.
  void RunInTurn(int64_t ticket, const std::function<void()>& write);

 private:
  std::atomic<int64_t> next_ticket_{0};
  absl::Mutex mu_;
  int64_t turn_ ABSL_GUARDED_BY(mu_) = 0;  // the ticket whose write runs next
};

}  // namespace herd::coordinator
