#include "worker/train/sync/sync_buckets.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

constexpr double kFloat = 4.0 / (1024 * 1024);  // one float, in MiB

// Reverse registration order; a bucket closes once it reaches its cap, so the
// parameter crossing the cap leaves with it.
TEST(SyncBuckets, ReverseOrderAndTheCrossingParameterStaysInItsBucket) {
  std::vector<torch::Tensor> params = {torch::zeros({5}), torch::zeros({3}), torch::zeros({2}), torch::zeros({1})};
  BucketLayout layout = PlanBuckets(params, /*first=*/2 * kFloat, /*cap=*/4 * kFloat, false);
  ASSERT_EQ(layout.buckets.size(), 2u);
  EXPECT_EQ(layout.buckets[0], (std::vector<int>{3, 2}));  // 1 + 2 >= 2: closes, holding the crossing one
  EXPECT_EQ(layout.buckets[1], (std::vector<int>{1, 0}));  // 3 < 4, then 3 + 5 >= 4
  EXPECT_EQ(layout.elements, (std::vector<int64_t>{3, 8}));
  EXPECT_EQ(layout.slots[2].offset, 1);
}

TEST(SyncBuckets, ParametersWithoutGradientsCanBeLeftOut) {
  std::vector<torch::Tensor> params = {torch::zeros({4}).requires_grad_(), torch::zeros({4}),
                                       torch::zeros({4}).requires_grad_()};
  BucketLayout layout = PlanBuckets(params, 100 * kFloat, 100 * kFloat, /*only_requiring_grad=*/true);
  ASSERT_EQ(layout.buckets.size(), 1u);
  EXPECT_EQ(layout.buckets[0], (std::vector<int>{2, 0}));
  EXPECT_EQ(layout.elements[0], 8);
  EXPECT_EQ(layout.slots[1].bucket, -1);
  EXPECT_EQ(layout.slots[0].offset, 4);
  EXPECT_EQ(PlanBuckets(params, 100 * kFloat, 100 * kFloat, false).elements[0], 12);
}

}  // namespace
}  // namespace herd
