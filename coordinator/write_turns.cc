#include "coordinator/write_turns.h"

namespace herd::coordinator {

int64_t WriteTurns::Take() { return next_ticket_.fetch_add(1); }

void WriteTurns::RunInTurn(int64_t ticket, const std::function<void()>& write) {
  struct Waiter {
    const int64_t* turn;
    int64_t ticket;
  } waiter{&turn_, ticket};
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](Waiter* w) { return *w->turn == w->ticket; }, &waiter));
  }
  // Alone until the turn passes on: no lock held, so taking a ticket (under
  // the coordinator's state lock) never waits for a write.
  write();
  absl::MutexLock lock(&mu_);
  ++turn_;
}

}  // namespace herd::coordinator
