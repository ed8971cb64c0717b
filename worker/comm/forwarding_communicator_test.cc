// Two Gloo ranks (threads of this process, real loopback sockets), each seen
// through a ForwardingCommunicator that counts what passes its Issue hook:
// every collective must reach the inner communicator, give its result, and
// pass the hook exactly once, or a decorator built on it would miss it.
#include "worker/comm/forwarding_communicator.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/testing/gloo_test_ranks.h"

namespace herd {
namespace {

class CountingCommunicator : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  int issued() const { return issued_; }

 protected:
  std::shared_ptr<Work> Issue(Issuer issue) override {
    ++issued_;
    return issue();
  }

 private:
  std::atomic<int> issued_{0};
};

TEST(ForwardingCommunicatorTest, EveryCollectiveReachesTheInnerOneThroughIssue) {
  RunGlooRanks(2, [](int rank, Communicator* inner) {
    CountingCommunicator comm(inner);
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.size(), 2);
    EXPECT_EQ(comm.timeout(), inner->timeout());
    EXPECT_EQ(comm.backend(), "gloo");
    EXPECT_EQ(comm.ReduceScatterLayout(10, DataType::kFloat32), inner->ReduceScatterLayout(10, DataType::kFloat32));
    EXPECT_EQ(comm.AllocateAllReduceBuffer(64), nullptr);  // Gloo has none to offer

    float sum[2] = {1.0f + rank, 10.0f};
    ASSERT_TRUE(comm.AllReduce(sum, 2, DataType::kFloat32).ok());
    EXPECT_EQ(sum[0], 3.0f);
    EXPECT_EQ(sum[1], 20.0f);

    int64_t root_value = rank == 1 ? 42 : 0;
    ASSERT_TRUE(comm.Broadcast(&root_value, sizeof(root_value), 1).ok());
    EXPECT_EQ(root_value, 42);

    const int32_t mine = 100 + rank;
    int32_t all[2] = {0, 0};
    ASSERT_TRUE(comm.AllGather(&mine, sizeof(mine), all).ok());
    EXPECT_EQ(all[0], 100);
    EXPECT_EQ(all[1], 101);

    ASSERT_TRUE(comm.Barrier().ok());

    const float blocks[2] = {1.0f, 2.0f + rank};
    float block = 0;
    ASSERT_TRUE(comm.ReduceScatter(blocks, &block, 1, DataType::kFloat32).ok());
    EXPECT_EQ(block, rank == 0 ? 2.0f : 5.0f);

    float in_place[2] = {1.0f, 1.0f};
    ASSERT_TRUE(comm.ReduceScatterInPlaceAsync(in_place, 2, DataType::kFloat32)->Wait().ok());
    const RangeLayout layout = comm.ReduceScatterLayout(2, DataType::kFloat32);
    for (const ElementRange& range : layout[rank]) {
      for (size_t i = range.begin; i < range.end; ++i) EXPECT_EQ(in_place[i], 2.0f);
    }

    EXPECT_EQ(comm.issued(), 6);
  });
}

}  // namespace
}  // namespace herd
