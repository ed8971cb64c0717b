#include "coordinator/write_turns.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace herd::coordinator {
namespace {

// Writers that reach their turn out of order still write in ticket order.
TEST(WriteTurnsTest, WritesRunInTicketOrderWhateverOrderTheyArrive) {
  WriteTurns turns;
  std::vector<int64_t> tickets;
  for (int i = 0; i < 6; ++i) tickets.push_back(turns.Take());
  absl::Mutex mu;
  std::vector<int64_t> written;
  std::vector<std::thread> writers;
  for (int i = 5; i >= 0; --i) {  // the latest ticket arrives first
    writers.emplace_back([&, i] {
      turns.RunInTurn(tickets[i], [&] {
        absl::MutexLock lock(&mu);
        written.push_back(tickets[i]);
      });
    });
  }
  for (std::thread& writer : writers) writer.join();
  EXPECT_EQ(written, tickets);
}

// Taking a ticket (under the coordinator's state lock) never waits for a
// write in progress.
TEST(WriteTurnsTest, TakingATicketDoesNotWaitForAWrite) {
  WriteTurns turns;
  absl::Notification writing, release;
  std::thread writer([&] {
    turns.RunInTurn(turns.Take(), [&] {
      writing.Notify();
      release.WaitForNotification();
    });
  });
  writing.WaitForNotification();
  EXPECT_EQ(turns.Take(), 1);  // would hang if Take waited for the write
  release.Notify();
  writer.join();
  turns.RunInTurn(1, [] {});
}

}  // namespace
}  // namespace herd::coordinator
