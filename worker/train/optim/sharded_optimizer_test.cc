#include "worker/train/optim/sharded_optimizer.h"

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <gtest/gtest.h>

#include <functional>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "worker/comm/testing/gloo_test_ranks.h"
#include "worker/train/optim/grad_clip.h"
#include "worker/train/step/torch_compat.h"  // OptimizerStateKey

namespace herd {
namespace {

TEST(FlatShardBounds, NearEqualContiguousRanges) {
  EXPECT_EQ(FlatShardBounds(20, 3), (std::vector<int64_t>{0, 6, 13, 20}));
  EXPECT_EQ(FlatShardBounds(9, 3), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(FlatShardBounds(5, 1), (std::vector<int64_t>{0, 5}));
  // More ranks than elements: some ranges are empty.
  EXPECT_EQ(FlatShardBounds(2, 3), (std::vector<int64_t>{0, 0, 1, 2}));
}

TEST(ShardPieces, RangesCutAcrossTensors) {
  // Flat 0..20, ranges [0,6) [6,13) [13,20): the first tensor is split
  // between ranks 0 and 1, rank 1 also owns the second whole.
  EXPECT_EQ(ShardPieces({10, 3, 7}, 3), (std::vector<ShardPiece>{{0, 0, 0, 6, 0},
                                                                 {0, 1, 6, 4, 6},
                                                                 {1, 1, 0, 3, 10},
                                                                 {2, 2, 0, 7, 13}}));
  // One tensor holding nearly everything is spread over every rank.
  EXPECT_EQ(ShardPieces({100, 2}, 2), (std::vector<ShardPiece>{{0, 0, 0, 51, 0}, {0, 1, 51, 49, 51}, {1, 1, 0, 2, 100}}));
  // Empty tensors have no piece; a rank with an empty range owns none.
  EXPECT_EQ(ShardPieces({0, 2, 0}, 3), (std::vector<ShardPiece>{{1, 1, 0, 1, 0}, {1, 2, 1, 1, 1}}));
  EXPECT_EQ(ShardPieces({4, 4}, 1), (std::vector<ShardPiece>{{0, 0, 0, 4, 0}, {1, 0, 0, 4, 4}}));
}

const std::vector<int64_t> kRows = {64, 7, 32, 5, 48, 16};
// One tensor holds nearly all the state (mnist_cnn's shape of problem).
const std::vector<int64_t> kUnevenRows = {400, 7, 5};

// With `channels_last`, parameter 1 is a conv-like weight stored
// channels-last (not contiguous), as mnist_cnn's are.
std::vector<torch::Tensor> MakeParams(const std::vector<int64_t>& rows, bool channels_last) {
  // Deterministic without the global RNG, which rank threads share.
  std::vector<torch::Tensor> params;
  for (int64_t n : rows) {
    auto values = torch::sin(torch::arange(n * 3, torch::kFloat).reshape({n, 3}) * 0.37 + static_cast<double>(n));
    params.push_back(values.requires_grad_(true));
  }
  if (channels_last) {
    auto weight = torch::cos(torch::arange(2 * 3 * 4 * 5, torch::kFloat).reshape({2, 3, 4, 5}) * 0.29)
                      .contiguous(at::MemoryFormat::ChannelsLast);
    params.insert(params.begin() + 1, weight.requires_grad_(true));
  }
  return params;
}

// The gradient every rank holds after the all-reduce of step `step`;
// parameters listed in `without` get none (unused in the forward).
void SetGradients(const std::vector<torch::Tensor>& params, int step, const std::vector<size_t>& without = {}) {
  for (size_t i = 0; i < params.size(); ++i) {
    const bool none = std::find(without.begin(), without.end(), i) != without.end();
    params[i].mutable_grad() =
        none ? torch::Tensor() : torch::sin(params[i].detach() * (step + 1) + static_cast<double>(i));
  }
}

// Every state tensor and step count of every parameter, bitwise.
void ExpectSameState(torch::optim::Optimizer& got, torch::optim::Optimizer& want,
                     const std::vector<torch::Tensor>& got_params, const std::vector<torch::Tensor>& want_params,
                     const std::string& where) {
  EXPECT_EQ(got.state().size(), want.state().size()) << where;
  auto same = [&](const torch::Tensor& a, const torch::Tensor& b) {
    return a.defined() == b.defined() && (!a.defined() || torch::equal(a, b));
  };
  for (size_t i = 0; i < got_params.size(); ++i) {
    auto g = got.state().find(OptimizerStateKey(got_params[i]));
    auto w = want.state().find(OptimizerStateKey(want_params[i]));
    ASSERT_EQ(g == got.state().end(), w == want.state().end()) << where << " parameter " << i;
    if (w == want.state().end()) continue;
    if (auto* ws = dynamic_cast<torch::optim::SGDParamState*>(w->second.get())) {
      auto* gs = dynamic_cast<torch::optim::SGDParamState*>(g->second.get());
      ASSERT_NE(gs, nullptr);
      EXPECT_TRUE(same(gs->momentum_buffer(), ws->momentum_buffer())) << where << " parameter " << i;
    } else if (auto* ws = dynamic_cast<torch::optim::AdamParamState*>(w->second.get())) {
      auto* gs = dynamic_cast<torch::optim::AdamParamState*>(g->second.get());
      ASSERT_NE(gs, nullptr);
      EXPECT_EQ(gs->step(), ws->step()) << where << " parameter " << i;
      EXPECT_TRUE(same(gs->exp_avg(), ws->exp_avg()) && same(gs->exp_avg_sq(), ws->exp_avg_sq()) &&
                  same(gs->max_exp_avg_sq(), ws->max_exp_avg_sq()))
          << where << " parameter " << i;
    } else if (auto* ws = dynamic_cast<torch::optim::AdamWParamState*>(w->second.get())) {
      auto* gs = dynamic_cast<torch::optim::AdamWParamState*>(g->second.get());
      ASSERT_NE(gs, nullptr);
      EXPECT_EQ(gs->step(), ws->step()) << where << " parameter " << i;
      EXPECT_TRUE(same(gs->exp_avg(), ws->exp_avg()) && same(gs->exp_avg_sq(), ws->exp_avg_sq()) &&
                  same(gs->max_exp_avg_sq(), ws->max_exp_avg_sq()))
          << where << " parameter " << i;
    }
  }
}

using OptimizerMaker = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

struct OptimizerCase {
  std::string name;
  OptimizerMaker make;
};

class ShardedStepTest : public testing::TestWithParam<OptimizerCase> {};

// Each rank steps its own range and all-gathers the parameters: every rank
// ends bitwise where one unsharded optimizer ends, holding the state of its
// range only (1/W of the elements, tensors cut across ranks), and
// GatherState rebuilds the whole per-parameter state exactly, step counts
// included; sharded steps from the gathered state (cut into pieces again)
// still match.
// Pieces as a gradient reduce-scatter hands them out (GradientSync's
// layout): listed in reverse parameter order (bucket order), a parameter cut
// in three, its first and last quarter-and-half on one rank (two pieces of
// one parameter on one rank, as a striped Gloo layout gives).
std::vector<ShardPiece> ScatteredLayout(const std::vector<int64_t>& numels, int world) {
  std::vector<ShardPiece> pieces;
  int64_t flat = 0;
  for (size_t k = numels.size(); k-- > 0;) {
    const int64_t n = numels[k];
    const int64_t cuts[] = {0, n / 4, n / 2, n};
    const int ranks[] = {static_cast<int>(k) % world, (static_cast<int>(k) + 1) % world, static_cast<int>(k) % world};
    for (int c = 0; c < 3; ++c) {
      if (cuts[c + 1] > cuts[c]) pieces.push_back(ShardPiece{k, ranks[c], cuts[c], cuts[c + 1] - cuts[c], flat + cuts[c]});
    }
    flat += n;
  }
  return pieces;
}

void CheckShardedStepsAndGather(const OptimizerCase& optimizer_case, const std::vector<int64_t>& rows,
                                const std::vector<size_t>& without_gradient, bool channels_last = false,
                                bool scattered = false) {
  auto MakeParams = [&] { return herd::MakeParams(rows, channels_last); };
  constexpr int kSteps = 6;
  constexpr int kMore = 2;  // sharded steps after the gather
  constexpr int kWorld = 3;
  auto reference_params = MakeParams();
  std::vector<int64_t> numels;
  for (const auto& p : reference_params) numels.push_back(p.numel());
  auto reference = optimizer_case.make(reference_params);
  for (int step = 0; step < kSteps; ++step) {
    SetGradients(reference_params, step, without_gradient);
    reference->step();
  }
  const int64_t full_bytes = OptimizerStateBytes(*reference);
  ASSERT_GT(full_bytes, 0);
  int64_t state_elements = 0;  // of parameters that have state
  for (size_t i = 0; i < numels.size(); ++i) {
    if (std::find(without_gradient.begin(), without_gradient.end(), i) == without_gradient.end()) {
      state_elements += numels[i];
    }
  }
  const int64_t bytes_per_element = full_bytes / state_elements;

  std::mutex mu;
  std::vector<int64_t> shard_bytes(kWorld, 0);
  RunGlooRanks(kWorld, [&](int rank, Communicator* comm) {
    auto params = MakeParams();
    auto optimizer = optimizer_case.make(params);
    std::vector<int64_t> param_numels;
    for (const auto& p : params) param_numels.push_back(p.numel());
    auto shards = scattered ? OptimizerShards::Create(params, comm, ScatteredLayout(param_numels, kWorld))
                            : OptimizerShards::Create(params, comm);
    ASSERT_TRUE(shards.ok()) << shards.status();
    auto sharded_step = [&](int step) {
      SetGradients(params, step, without_gradient);
      ASSERT_TRUE((*shards)->StepOwnRange(*optimizer).ok());
      ASSERT_TRUE((*shards)->ShareParameters().ok());
    };
    for (int step = 0; step < kSteps; ++step) sharded_step(step);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], reference_params[i])) << "rank " << rank << " parameter " << i;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      shard_bytes[rank] = OptimizerStateBytes(*optimizer);
    }
    ASSERT_TRUE((*shards)->GatherState(*optimizer).ok());
    EXPECT_EQ(OptimizerStateBytes(*optimizer), full_bytes) << "rank " << rank;
    ExpectSameState(*optimizer, *reference, params, reference_params, absl::StrCat("rank ", rank, " gathered"));
    for (int step = kSteps; step < kSteps + kMore; ++step) sharded_step(step);
    auto expected = MakeParams();
    {
      std::lock_guard<std::mutex> lock(mu);  // one reference replay at a time
      auto replay = optimizer_case.make(expected);
      for (int step = 0; step < kSteps + kMore; ++step) {
        SetGradients(expected, step, without_gradient);
        replay->step();
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], expected[i])) << "rank " << rank << " parameter " << i << " after gather";
    }
  });
  // Each rank holds exactly the state of its pieces' elements that have state.
  std::vector<int64_t> expected(kWorld, 0);
  for (const ShardPiece& piece : scattered ? ScatteredLayout(numels, kWorld) : ShardPieces(numels, kWorld)) {
    if (std::find(without_gradient.begin(), without_gradient.end(), piece.param) == without_gradient.end()) {
      expected[piece.rank] += piece.length * bytes_per_element;
    }
  }
  int64_t total = 0;
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(shard_bytes[r], expected[r]) << "rank " << r;
    total += shard_bytes[r];
  }
  EXPECT_EQ(total, full_bytes);
}

TEST_P(ShardedStepTest, MatchesTheUnshardedOptimizerBitwise) {
  CheckShardedStepsAndGather(GetParam(), kRows, {});
}

// Ranges count elements in logical order; a channels-last parameter (cut
// between ranks 0 and 1 here) is read and written through its strides.
TEST_P(ShardedStepTest, NonContiguousParameterIsCutInLogicalOrder) {
  CheckShardedStepsAndGather(GetParam(), kRows, {}, /*channels_last=*/true);
}

TEST_P(ShardedStepTest, OneDominantTensorIsSplitOverEveryRank) {
  CheckShardedStepsAndGather(GetParam(), kUnevenRows, {});
}

// The dominant tensor never gets a gradient, so has no state: ranks 0 and 1
// hold none and GatherState broadcasts rank 2's block alone rather than pad
// the others to it.
TEST_P(ShardedStepTest, StateOfOnlySomeRangesGathersBitwise) {
  CheckShardedStepsAndGather(GetParam(), kUnevenRows, {0});
}

// Ownership given by a gradient reduce-scatter's layout: pieces in bucket
// order, several per parameter and per rank.
TEST_P(ShardedStepTest, ScatteredPiecesMatchTheUnshardedOptimizerBitwise) {
  CheckShardedStepsAndGather(GetParam(), kRows, {}, /*channels_last=*/false, /*scattered=*/true);
  CheckShardedStepsAndGather(GetParam(), kUnevenRows, {0}, /*channels_last=*/true, /*scattered=*/true);
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

// Pieces must cover each parameter exactly once; parameters no piece covers
// go whole to rank 0.
TEST(OptimizerShards, PiecesAreValidated) {
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    auto params = MakeParams({4, 3}, false);  // 12 and 9 elements
    EXPECT_EQ(OptimizerShards::Create(params, comm, {{0, 0, 0, 12, 0}, {1, 1, 0, 5, 12}}).status().code(),
              absl::StatusCode::kInvalidArgument);  // part of parameter 1 left out
    EXPECT_EQ(OptimizerShards::Create(params, comm, {{0, 0, 0, 12, 0}, {0, 1, 6, 6, 6}}).status().code(),
              absl::StatusCode::kInvalidArgument);  // overlap
    EXPECT_EQ(OptimizerShards::Create(params, comm, {{0, 2, 0, 12, 0}}).status().code(),
              absl::StatusCode::kInvalidArgument);  // no rank 2
    auto shards = OptimizerShards::Create(params, comm, {{1, 1, 0, 9, 0}});
    ASSERT_TRUE(shards.ok()) << shards.status();
    EXPECT_EQ((*shards)->owned_bytes(), rank == 0 ? 12 * 4 : 9 * 4);
  });
}

// The norm from every rank's pieces is the global norm of the gradients,
// and each rank's pieces are scaled bit for bit as the unsharded rule
// (grad_clip.h, over whole gradients) scales them; both are torch's
// clip_grad_norm_ up to float rounding.
TEST(OptimizerShards, ClipGradNormUsesEveryRanksPieces) {
  const std::vector<int64_t> rows = {64, 7, 32};
  auto reference = MakeParams(rows, false);
  SetGradients(reference, 2);
  auto torch_clipped = MakeParams(rows, false);
  SetGradients(torch_clipped, 2);
  std::vector<int64_t> numels;
  for (const auto& p : reference) numels.push_back(p.numel());
  const double norm = ClipGradNorm(reference, 0.5);
  const double torch_norm = torch::nn::utils::clip_grad_norm_(torch_clipped, 0.5);
  ASSERT_GT(norm, 0.5 * 2);  // clipping really scales
  EXPECT_NEAR(norm, torch_norm, 1e-5 * torch_norm);
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_LT((reference[i].grad() - torch_clipped[i].grad()).abs().max().item<double>(), 1e-6) << i;
  }
  RunGlooRanks(3, [&](int rank, Communicator* comm) {
    auto params = MakeParams(rows, false);
    SetGradients(params, 2);
    auto shards = OptimizerShards::Create(params, comm, ScatteredLayout(numels, 3));
    ASSERT_TRUE(shards.ok()) << shards.status();
    auto got = (*shards)->ClipGradNorm(0.5);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(*got, norm, 1e-12 * norm);
    auto original = MakeParams(rows, false);
    SetGradients(original, 2);
    for (const ShardPiece& piece : ScatteredLayout(numels, 3)) {
      auto mine = params[piece.param].grad().reshape({-1}).narrow(0, piece.offset, piece.length);
      // This rank's pieces clipped as the whole rule clips them; the others left alone.
      const auto& want = piece.rank == rank ? reference : original;
      EXPECT_TRUE(torch::equal(mine, want[piece.param].grad().reshape({-1}).narrow(0, piece.offset, piece.length)))
          << "rank " << rank << " parameter " << piece.param << " at " << piece.offset;
    }
    // Below the limit nothing changes.
    auto before = params[0].grad().clone();
    auto small = (*shards)->ClipGradNorm(1e9);
    ASSERT_TRUE(small.ok());
    EXPECT_TRUE(torch::equal(params[0].grad(), before));
  });
}

}  // namespace
}  // namespace herd
