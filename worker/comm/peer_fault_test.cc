#include "worker/comm/peer_fault.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace herd {
namespace {

TEST(PeerFault, ClosedAndLatePeersAreNamedThroughAddedContext) {
  const absl::Status closed = WithContext(WithContext(PeerClosedError(2), "all-reduce: "), "gradient sync at step 9: ");
  EXPECT_EQ(closed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(closed.message(), "gradient sync at step 9: all-reduce: rank 2 closed its connection");
  ASSERT_TRUE(PeerFaultOf(closed).has_value());
  EXPECT_EQ(PeerFaultOf(closed)->kind, PeerFaultKind::kClosed);
  EXPECT_EQ(PeerFaultOf(closed)->rank, 2);

  const absl::Status late = WithContext(PeerLateError(0, "rank 0 did not answer in time"), "vote: ");
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(PeerFaultOf(late).has_value());
  EXPECT_EQ(PeerFaultOf(late)->kind, PeerFaultKind::kLate);
  EXPECT_EQ(PeerFaultOf(late)->rank, 0);
}

TEST(PeerFault, AResetConnectionBlamesItsPeerAsClosed) {
  const absl::Status reset = PeerSocketError(1, ECONNRESET, "receiving from rank 1: Connection reset by peer");
  EXPECT_EQ(reset.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(reset.message(), "receiving from rank 1: Connection reset by peer");
  ASSERT_TRUE(PeerFaultOf(reset).has_value());
  EXPECT_EQ(PeerFaultOf(reset)->kind, PeerFaultKind::kClosed);
  EXPECT_EQ(PeerFaultOf(reset)->rank, 1);
  EXPECT_FALSE(PeerFaultOf(PeerSocketError(1, ENOMEM, "receiving from rank 1: out of memory")).has_value());
}

TEST(PeerFault, AStatusWithoutAPeerBlamesNone) {
  EXPECT_FALSE(PeerFaultOf(absl::UnavailableError("rank 2 closed its connection")).has_value())
      << "the text is never parsed";
  EXPECT_FALSE(PeerFaultOf(WithContext(absl::InternalError("x"), "y: ")).has_value());
  EXPECT_TRUE(WithContext(absl::OkStatus(), "y: ").ok());
}

TEST(PeerFault, ASubgroupsBlameIsRenumberedIntoTheWholeGroup) {
  // Subgroup ranks 0, 1 are ranks 2, 3 of the group.
  const absl::Status closed = InGroupRanks(PeerClosedError(1), {2, 3});
  EXPECT_EQ(closed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(closed.message(), "rank 1 closed its connection");
  ASSERT_TRUE(PeerFaultOf(closed).has_value());
  EXPECT_EQ(PeerFaultOf(closed)->kind, PeerFaultKind::kClosed);
  EXPECT_EQ(PeerFaultOf(closed)->rank, 3);
  const absl::Status late = InGroupRanks(WithContext(PeerLateError(0, "no answer"), "round: "), {2, 3});
  EXPECT_EQ(late.message(), "round: no answer");
  ASSERT_TRUE(PeerFaultOf(late).has_value());
  EXPECT_EQ(PeerFaultOf(late)->kind, PeerFaultKind::kLate);
  EXPECT_EQ(PeerFaultOf(late)->rank, 2);
  // Nobody blamed, or a rank the subgroup does not have: unchanged.
  EXPECT_FALSE(PeerFaultOf(InGroupRanks(absl::UnavailableError("x"), {2, 3})).has_value());
  EXPECT_EQ(PeerFaultOf(InGroupRanks(PeerClosedError(5), {2, 3}))->rank, 5);
  EXPECT_TRUE(InGroupRanks(absl::OkStatus(), {2, 3}).ok());
}

}  // namespace
}  // namespace herd
