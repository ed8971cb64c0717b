#include "worker/train/generation/release_vote.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "worker/comm/testing/gloo_test_ranks.h"

namespace herd {
namespace {

// Heartbeats reach the ranks at different times: each votes what it heard,
// and every rank sees the same union, so all named leavers go at once.
TEST(BoundaryVote, EveryRankSeesTheUnionOfTheLeaversAnyRankHeard) {
  const std::vector<std::vector<int64_t>> heard = {{2}, {}, {1, 2, 7, -1}};  // 7 and -1: not in this world
  const std::vector<bool> reform = {false, true, false};
  std::mutex mu;
  std::vector<BoundaryVote> votes(3);
  RunGlooRanks(3, [&](int rank, Communicator* comm) {
    auto vote = TakeBoundaryVote(comm, heard[rank], reform[rank]);
    ASSERT_TRUE(vote.ok()) << vote.status();
    std::lock_guard<std::mutex> lock(mu);
    votes[rank] = *vote;
  });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(votes[rank].leavers, ::testing::ElementsAre(1, 2)) << "rank " << rank;
    EXPECT_EQ(votes[rank].reformers, 1) << "rank " << rank;
  }
}

TEST(BoundaryVote, NobodyHeardAnything) {
  RunGlooRanks(2, [&](int, Communicator* comm) {
    auto vote = TakeBoundaryVote(comm, {}, false);
    ASSERT_TRUE(vote.ok()) << vote.status();
    EXPECT_TRUE(vote->leavers.empty());
    EXPECT_EQ(vote->reformers, 0);
  });
}

}  // namespace
}  // namespace herd
