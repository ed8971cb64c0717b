#include "coordinator/write_turns.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

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

}  // namespace
}  // namespace herd::coordinator
