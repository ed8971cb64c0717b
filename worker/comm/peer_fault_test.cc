#include "worker/comm/peer_fault.h"

#include <gtest/gtest.h>

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

TEST(PeerFault, AStatusWithoutAPeerBlamesNone) {
  EXPECT_FALSE(PeerFaultOf(absl::UnavailableError("rank 2 closed its connection")).has_value())
      << "the text is never parsed";
  EXPECT_FALSE(PeerFaultOf(WithContext(absl::InternalError("x"), "y: ")).has_value());
  EXPECT_TRUE(WithContext(absl::OkStatus(), "y: ").ok());
}

}  // namespace
}  // namespace herd
