#include "worker/train/sharded_optimizer.h"

#include <gtest/gtest.h>

#include <functional>
#include <mutex>

#include "worker/comm/gloo_test_ranks.h"

namespace herd {
namespace {

TEST(AssignShardOwners, LargestFirstToTheLeastLoadedRank) {
  // 100 -> r0, 60 -> r1, 50 -> r2, 40 -> r2 (50 < 60), 10 -> r1 (60 < 90).
  EXPECT_EQ(AssignShardOwners({10, 100, 40, 60, 50}, 3), (std::vector<int>{1, 0, 2, 1, 2}));
  EXPECT_EQ(AssignShardOwners({5, 5, 5}, 1), (std::vector<int>{0, 0, 0}));
  // More ranks than tensors: the extra ranks own nothing.
  EXPECT_EQ(AssignShardOwners({8, 4}, 3), (std::vector<int>{0, 1}));
}

const std::vector<int64_t> kBalancedRows = {64, 7, 32, 5, 48, 16};
// One tensor holds nearly all the state: GatherState broadcasts each shard
// rather than pad them all to the largest.
const std::vector<int64_t> kUnevenRows = {400, 7, 5};

std::vector<torch::Tensor> MakeParams(const std::vector<int64_t>& rows = kBalancedRows) {
  // Deterministic without the global RNG, which rank threads share.
  std::vector<torch::Tensor> params;
  for (int64_t n : rows) {
    auto values = torch::sin(torch::arange(n * 3, torch::kFloat).reshape({n, 3}) * 0.37 + static_cast<double>(n));
    params.push_back(values.requires_grad_(true));
  }
  return params;
}

// The gradient every rank holds after the all-reduce of step `step`.
void SetGradients(const std::vector<torch::Tensor>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = torch::sin(params[i].detach() * (step + 1) + static_cast<double>(i));
  }
}

using OptimizerMaker = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

struct OptimizerCase {
  std::string name;
  OptimizerMaker make;
};

class ShardedStepTest : public testing::TestWithParam<OptimizerCase> {};

// Each rank steps its own shard and all-gathers the parameters: every rank
// ends bitwise where one unsharded optimizer ends, holding part of the state
// (about 1/W when `balanced`), and GatherState rebuilds the whole state
// exactly: a further step still matches.
void CheckShardedStepsAndGather(const OptimizerCase& optimizer_case, const std::vector<int64_t>& rows, bool balanced) {
  constexpr int kSteps = 6;
  constexpr int kWorld = 3;
  auto MakeParams = [&] { return herd::MakeParams(rows); };
  auto reference_params = MakeParams();
  auto reference = optimizer_case.make(reference_params);
  for (int step = 0; step < kSteps; ++step) {
    SetGradients(reference_params, step);
    reference->step();
  }
  const int64_t full_bytes = OptimizerStateBytes(*reference);
  ASSERT_GT(full_bytes, 0);

  std::mutex mu;
  std::vector<int64_t> shard_bytes(kWorld, 0);
  RunGlooRanks(kWorld, [&](int rank, Communicator* comm) {
    auto params = MakeParams();
    auto optimizer = optimizer_case.make(params);
    auto shards = OptimizerShards::Create(params, comm);
    ASSERT_TRUE(shards.ok()) << shards.status();
    for (int step = 0; step < kSteps; ++step) {
      SetGradients(params, step);
      (*shards)->DropForeignState(*optimizer);
      (*shards)->DropForeignGradients();
      optimizer->step();
      ASSERT_TRUE((*shards)->ShareParameters().ok());
    }
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], reference_params[i])) << "rank " << rank << " parameter " << i;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      shard_bytes[rank] = OptimizerStateBytes(*optimizer);
    }
    ASSERT_TRUE((*shards)->GatherState(*optimizer).ok());
    EXPECT_EQ(OptimizerStateBytes(*optimizer), full_bytes);
    // A gathered state steps on exactly as the unsharded one does.
    SetGradients(params, kSteps);
    optimizer->step();
    auto expected = MakeParams();
    {
      std::lock_guard<std::mutex> lock(mu);  // one reference replay at a time
      auto replay = optimizer_case.make(expected);
      for (int step = 0; step <= kSteps; ++step) {
        SetGradients(expected, step);
        replay->step();
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], expected[i])) << "rank " << rank << " parameter " << i << " after gather";
    }
  });
  int64_t total = 0;
  for (int r = 0; r < kWorld; ++r) {
    total += shard_bytes[r];
    // Balanced by bytes: no rank holds more than half the state here.
    if (balanced) EXPECT_LT(shard_bytes[r], full_bytes / 2) << "rank " << r;
    EXPECT_GT(shard_bytes[r], 0) << "rank " << r;
  }
  EXPECT_EQ(total, full_bytes);
}

TEST_P(ShardedStepTest, MatchesTheUnshardedOptimizerBitwise) {
  CheckShardedStepsAndGather(GetParam(), kBalancedRows, /*balanced=*/true);
}

TEST_P(ShardedStepTest, UnevenShardsGatherTheWholeStateBitwise) {
  CheckShardedStepsAndGather(GetParam(), kUnevenRows, /*balanced=*/false);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, ShardedStepTest,
    testing::Values(
        OptimizerCase{"sgd_momentum",
                      [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
                        return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
                      }},
        OptimizerCase{"adam",
                      [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
                        return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01));
                      }},
        OptimizerCase{"adam_amsgrad",
                      [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
                        return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01).amsgrad(true));
                      }},
        OptimizerCase{"adamw",
                      [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
                        return std::make_unique<torch::optim::AdamW>(
                            p, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
                      }}),
    [](const testing::TestParamInfo<OptimizerCase>& info) { return info.param.name; });

}  // namespace
}  // namespace herd
