#include "worker/train/sync/round_shape.h"

#include "gtest/gtest.h"

namespace herd {
namespace {

TEST(RoundShapeTest, TwoRanksStartWithGatherWhichCostsNoMoreBytes) {
  EXPECT_EQ(InitialRoundShape(2), RoundShape::kGather);
  EXPECT_EQ(InitialRoundShape(3), RoundShape::kAllReduce);
  EXPECT_EQ(InitialRoundShape(8), RoundShape::kAllReduce);
}

TEST(RoundShapeTest, AllReduceStaysWhileTauCanHideItsRounds) {
  RoundShapeState state;
  state = NextRoundShape(state, 0.6, /*beyond_bound=*/false, /*full_window=*/true);
  EXPECT_EQ(state.shape, RoundShape::kAllReduce);
  EXPECT_EQ(state.all_reduce_round_seconds, 0);
}

TEST(RoundShapeTest, RoundsBeyondTheBoundTryGatherAndKeepItWhenFaster) {
  RoundShapeState state;
  state = NextRoundShape(state, 0.6, /*beyond_bound=*/true, /*full_window=*/true);
  EXPECT_EQ(state.shape, RoundShape::kGather);
  EXPECT_DOUBLE_EQ(state.all_reduce_round_seconds, 0.6);
  // Gather rounds faster: kept, even while still beyond the bound.
  state = NextRoundShape(state, 0.3, /*beyond_bound=*/true, /*full_window=*/true);
  EXPECT_EQ(state.shape, RoundShape::kGather);
  state = NextRoundShape(state, 0.25, /*beyond_bound=*/false, /*full_window=*/true);
  EXPECT_EQ(state.shape, RoundShape::kGather);
  EXPECT_FALSE(state.settled);
}

TEST(RoundShapeTest, GatherSlowerThanAllReduceGoesBackForGood) {
  RoundShapeState state;
  state = NextRoundShape(state, 0.6, /*beyond_bound=*/true, /*full_window=*/true);
  // A busy link: gather's extra bytes make its rounds slower.
  state = NextRoundShape(state, 0.9, /*beyond_bound=*/true, /*full_window=*/true);
  EXPECT_EQ(state.shape, RoundShape::kAllReduce);
  EXPECT_TRUE(state.settled);
  // No oscillation: beyond the bound again, it stays.
  state = NextRoundShape(state, 0.7, /*beyond_bound=*/true, /*full_window=*/true);
  EXPECT_EQ(state.shape, RoundShape::kAllReduce);
}

TEST(RoundShapeTest, GatherIsJudgedOnlyOnAFullWindowOfItsOwnRounds) {
  RoundShapeState state;
  state = NextRoundShape(state, 0.6, /*beyond_bound=*/true, /*full_window=*/true);
  // The first gather rounds share the link with the all-reduce backlog.
  state = NextRoundShape(state, 0.9, /*beyond_bound=*/true, /*full_window=*/false);
  EXPECT_EQ(state.shape, RoundShape::kGather);
  EXPECT_FALSE(state.settled);
  state = NextRoundShape(state, 0.3, /*beyond_bound=*/false, /*full_window=*/true);
  EXPECT_EQ(state.shape, RoundShape::kGather);
}

TEST(RoundShapeTest, ATwoRankGatherIsNeverSwitchedWithoutAnAllReduceToCompare) {
  RoundShapeState state;
  state.shape = InitialRoundShape(2);
  state = NextRoundShape(state, 5.0, /*beyond_bound=*/true, /*full_window=*/true);
  EXPECT_EQ(state.shape, RoundShape::kGather);
}

}  // namespace
}  // namespace herd
