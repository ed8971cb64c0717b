#include "worker/daemon/backoff.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace herd::worker {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;

std::vector<int64_t> Delays(Backoff& backoff, int n) {
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(backoff.Next().count());
  return out;
}

TEST(BackoffTest, DoublesUpToTheMaxAndStartsOverAfterAReset) {
  Backoff backoff(milliseconds(100), milliseconds(1000));
  EXPECT_THAT(Delays(backoff, 6), ElementsAre(100, 200, 400, 800, 1000, 1000));
  backoff.Reset();
  EXPECT_THAT(Delays(backoff, 2), ElementsAre(100, 200));
}

TEST(BackoffTest, AnInitialDelayAboveTheMaxIsCapped) {
  Backoff backoff(milliseconds(500), milliseconds(300));
  EXPECT_THAT(Delays(backoff, 2), ElementsAre(300, 300));
}

// The daemon's retries against the coordinator, as daemon.cc draws them.
std::vector<int64_t> RetryDelays(milliseconds lease, int n) {
  Backoff backoff(milliseconds(100), milliseconds(5000));
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(RetryDelayWithinLease(backoff.Next(), lease, milliseconds(100)).count());
  return out;
}

TEST(RetryDelayWithinLeaseTest, WithoutALeaseTheBackoffGrowsToItsMax) {
  EXPECT_THAT(RetryDelays(milliseconds(0), 8), ElementsAre(100, 200, 400, 800, 1600, 3200, 5000, 5000));
}

TEST(RetryDelayWithinLeaseTest, RetriesStayAQuarterOfTheLeaseApart) {
  // A 0.8 s lease: at most 0.2 s between retries, so four fit in it.
  EXPECT_THAT(RetryDelays(milliseconds(800), 6), ElementsAre(100, 200, 200, 200, 200, 200));
  // A 10 s lease caps the 5 s max backoff at 2.5 s.
  EXPECT_THAT(RetryDelays(milliseconds(10000), 8), ElementsAre(100, 200, 400, 800, 1600, 2500, 2500, 2500));
}

TEST(RetryDelayWithinLeaseTest, AShortLeaseNeverGoesBelowTheFloor) {
  // A quarter of 0.2 s is 50 ms, under the 100 ms floor.
  EXPECT_THAT(RetryDelays(milliseconds(200), 3), ElementsAre(100, 100, 100));
}

}  // namespace
}  // namespace herd::worker
