#include "coordinator/write_turns.h"

namespace herd::coordinator {

int64_t WriteTurns::Take() {
  absl::MutexLock lock(&mu_);
  return next_ticket_++;
}

void WriteTurns::RunInTurn(int64_t ticket, const std::function<void()>& write) {
  absl::MutexLock lock(&mu_);
  struct Waiter {
    const int64_t* turn;
    int64_t ticket;
  } waiter{&turn_, ticket};
  mu_.Await(absl::Condition(+[](Waiter* w) { return *w->turn == w->ticket; }, &waiter));
  // Held while writing: the next ticket's write waits for this one.
  write();
  ++turn_;
}

}  // namespace herd::coordinator
