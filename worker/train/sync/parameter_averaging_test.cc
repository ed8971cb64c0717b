#include "worker/train/sync/parameter_averaging.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <mutex>

#include "worker/comm/testing/gloo_test_ranks.h"
#include "worker/train/sync/gradient_sync.h"
#include "worker/train/sync/replicas.h"

namespace herd {
namespace {

// The hand-computed example: 2 ranks, 3 parameters, outer Nesterov with
// lr 0.7 and momentum 0.9, anchor a0 = [1, 2, 3], momentum m0 = 0.
//
// Round 1: ranks hold p0 = [0.5, 2.0, 3.5], p1 = [0.7, 1.6, 3.1]
//   average          = [0.6, 1.8, 3.3]
//   g1 = a0 - avg    = [0.4, 0.2, -0.3]
//   m1 = 0.9*0 + g1  = [0.4, 0.2, -0.3]
//   g1 + 0.9*m1      = [0.76, 0.38, -0.57]
//   a1 = a0 - 0.7*() = [0.468, 1.734, 3.399]
// Round 2: ranks trained on from a1 to p0 = [0.368, 1.834, 3.399],
//   p1 = [0.468, 1.634, 3.199]
//   average          = [0.418, 1.734, 3.299]
//   g2 = a1 - avg    = [0.05, 0, 0.1]
//   m2 = 0.9*m1 + g2 = [0.41, 0.18, -0.17]
//   g2 + 0.9*m2      = [0.419, 0.162, -0.053]
//   a2 = a1 - 0.7*() = [0.1747, 1.6206, 3.4361]
const std::vector<float> kAnchor0 = {1, 2, 3};
const std::vector<std::vector<float>> kRound1 = {{0.5f, 2.0f, 3.5f}, {0.7f, 1.6f, 3.1f}};
const std::vector<float> kAnchor1 = {0.468f, 1.734f, 3.399f};
const std::vector<float> kMomentum1 = {0.4f, 0.2f, -0.3f};
const std::vector<std::vector<float>> kRound2 = {{0.368f, 1.834f, 3.399f}, {0.468f, 1.634f, 3.199f}};
const std::vector<float> kAnchor2 = {0.1747f, 1.6206f, 3.4361f};
const std::vector<float> kMomentum2 = {0.41f, 0.18f, -0.17f};
constexpr double kExampleTolerance = 1e-5;

torch::Tensor T(const std::vector<float>& v) { return torch::tensor(v, torch::kFloat); }

double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

OuterStepConfig Nesterov() { return OuterStepConfig{OuterKind::kNesterov, 0.7, 0.9}; }

TEST(OuterStep, NesterovMatchesTheHandComputedExample) {
  torch::Tensor anchor = T(kAnchor0);
  torch::Tensor momentum = torch::zeros({3});
  OuterStep(Nesterov(), anchor - (T(kRound1[0]) + T(kRound1[1])) / 2, anchor, momentum);
  EXPECT_LT(MaxDiff(anchor, T(kAnchor1)), kExampleTolerance) << anchor;
  EXPECT_LT(MaxDiff(momentum, T(kMomentum1)), kExampleTolerance) << momentum;
  OuterStep(Nesterov(), anchor - (T(kRound2[0]) + T(kRound2[1])) / 2, anchor, momentum);
  EXPECT_LT(MaxDiff(anchor, T(kAnchor2)), kExampleTolerance) << anchor;
  EXPECT_LT(MaxDiff(momentum, T(kMomentum2)), kExampleTolerance) << momentum;
}

TEST(OuterStep, NoneSetsTheAnchorToTheAverage) {
  torch::Tensor anchor = T(kAnchor0);
  torch::Tensor unused;
  OuterStep(OuterStepConfig{}, anchor - (T(kRound1[0]) + T(kRound1[1])) / 2, anchor, unused);
  EXPECT_LT(MaxDiff(anchor, T({0.6f, 1.8f, 3.3f})), 1e-6) << anchor;
}

// Runs `body(rank, comm)` on `world` threads with Gloo communicators.
ParameterAveragingOptions TinyBuckets(OuterKind outer = OuterKind::kNone, DataType wire = DataType::kFloat32) {
  ParameterAveragingOptions options;
  options.first_bucket_mib = 1.0 / 1024;  // 1 KiB: a few buckets even for small nets
  options.bucket_cap_mib = 8.0 / 1024;
  options.wire_type = wire;
  options.outer = outer == OuterKind::kNesterov ? Nesterov() : OuterStepConfig{};
  return options;
}

void Assign(torch::Tensor& param, const std::vector<float>& values) {
  torch::NoGradGuard no_grad;
  param.copy_(T(values).view(param.sizes()));
}

// The same example through real ranks, with the 3 values split over two
// parameters in separate buckets so flattening and bucketing are exercised.
TEST(ParameterAveraging, TwoRanksFollowTheHandComputedExample) {
  std::vector<std::vector<torch::Tensor>> after1(2), after2(2);
  std::vector<AveragingRoundStats> stats(2);
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    std::vector<torch::Tensor> params = {torch::tensor({1.0f, 2.0f}).requires_grad_(),
                                         torch::tensor({3.0f}).requires_grad_()};
    ParameterAveragingOptions options = TinyBuckets(OuterKind::kNesterov);
    options.first_bucket_mib = 4.0 / (1024 * 1024);  // one float: the second parameter alone
    options.outer.lr = 0.7;
    options.outer.momentum = 0.9;
    auto averaging = ParameterAveraging::Create(params, comm, options);
    ASSERT_TRUE(averaging.ok()) << averaging.status();
    ASSERT_EQ((*averaging)->bucket_elements(), (std::vector<int64_t>{1, 2}));
    auto set = [&](const std::vector<float>& v) {
      Assign(params[0], {v[0], v[1]});
      Assign(params[1], {v[2]});
    };
    set(kRound1[rank]);
    ASSERT_TRUE((*averaging)->Round().ok());
    after1[rank] = {params[0].detach().clone(), params[1].detach().clone()};
    set(kRound2[rank]);
    ASSERT_TRUE((*averaging)->Round().ok());
    after2[rank] = {params[0].detach().clone(), params[1].detach().clone()};
    stats[rank] = (*averaging)->last_round();
  });
  EXPECT_LT(MaxDiff(torch::cat(after1[0]), T(kAnchor1)), kExampleTolerance) << torch::cat(after1[0]);
  EXPECT_LT(MaxDiff(torch::cat(after2[0]), T(kAnchor2)), kExampleTolerance) << torch::cat(after2[0]);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(torch::equal(after1[0][i], after1[1][i]));
    EXPECT_TRUE(torch::equal(after2[0][i], after2[1][i]));
  }
  EXPECT_EQ(stats[0].rounds, 2);
  EXPECT_EQ(stats[0].wire_bytes, 3 * 4);
}

// Throughput shares: a rank that trained 3/4 of the round's samples counts
// 3/4 in the mean (weights 1.5 and 0.5 over two ranks), for every fragment
// and for a launched round as for a full one.
TEST(ParameterAveraging, WeightedRoundIsTheSampleWeightedMean) {
  std::vector<torch::Tensor> after_full(2), after_launch(2);
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    std::vector<torch::Tensor> params = {torch::tensor({1.0f, 2.0f, 3.0f}).requires_grad_()};
    ParameterAveragingOptions options = TinyBuckets();
    options.fragments = 1;
    auto averaging = ParameterAveraging::Create(params, comm, options);
    ASSERT_TRUE(averaging.ok()) << averaging.status();
    const double weight = rank == 0 ? 1.5 : 0.5;
    Assign(params[0], kRound1[rank]);
    ASSERT_TRUE((*averaging)->Round({weight}).ok());
    after_full[rank] = params[0].detach().clone();
    Assign(params[0], kRound2[rank]);
    ASSERT_TRUE((*averaging)->Launch(0, /*keep_local_steps=*/false, weight).ok());
    ASSERT_TRUE((*averaging)->Finish().ok());
    after_launch[rank] = params[0].detach().clone();
  });
  // Outer none: the anchor becomes the weighted mean of the replicas.
  const torch::Tensor expected1 = 0.75 * T(kRound1[0]) + 0.25 * T(kRound1[1]);
  const torch::Tensor expected2 = 0.75 * T(kRound2[0]) + 0.25 * T(kRound2[1]);
  EXPECT_LT(MaxDiff(after_full[0], expected1), 1e-6) << after_full[0];
  EXPECT_LT(MaxDiff(after_launch[0], expected2), 1e-6) << after_launch[0];
  EXPECT_TRUE(torch::equal(after_full[0], after_full[1]));
  EXPECT_TRUE(torch::equal(after_launch[0], after_launch[1]));
}

// A small MLP; several buckets with the tiny caps above.
struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 32));
    fc3 = register_module("fc3", torch::nn::Linear(32, 5));
  }
  torch::Tensor forward(torch::Tensor x) { return fc3(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// Rank threads must not draw from the global generator at the same time, or
// the replicas would start different.
std::shared_ptr<Net> MakeNet() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(3);
  return std::make_shared<Net>();
}

struct Data {
  Data(int64_t rows) : x(torch::randn({rows, 16})), y(torch::randint(0, 5, {rows}, torch::kLong)) {}
  torch::Tensor x, y;
};

torch::Tensor Loss(Net& net, const Data& data, int64_t begin, int64_t end) {
  return torch::nn::functional::cross_entropy(net.forward(data.x.slice(0, begin, end)), data.y.slice(0, begin, end));
}

constexpr int kSteps = 5;
constexpr int64_t kRowsPerRank = 6;

// Trains 2 ranks for kSteps SGD steps, each step taking the next
// 2*kRowsPerRank rows (rank r its half), and returns rank 0's parameters.
// `averaging`: no gradient sync, local-mean loss, a round after every step.
// Otherwise: the all-reduce mode (loss scaled by the local share, gradients
// summed).
torch::Tensor TrainTwoRanks(const Data& data, bool averaging, double momentum) {
  std::vector<torch::Tensor> final_params(2);
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    auto net = MakeNet();
    auto params = net->parameters();
    torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1).momentum(momentum));
    std::unique_ptr<GradientSync> sync;
    std::unique_ptr<ParameterAveraging> average;
    if (averaging) {
      auto created = ParameterAveraging::Create(params, comm, TinyBuckets());
      ASSERT_TRUE(created.ok()) << created.status();
      average = std::move(*created);
    } else {
      GradientSyncOptions options;
      options.first_bucket_mib = 1.0 / 1024;
      options.bucket_cap_mib = 8.0 / 1024;
      sync = std::make_unique<GradientSync>(params, comm, options);
    }
    for (int step = 0; step < kSteps; ++step) {
      for (auto& p : params) p.mutable_grad() = torch::Tensor();
      const int64_t begin = (2 * step + rank) * kRowsPerRank;
      if (sync) sync->ArmForBackward();
      {
        // Backward hooks only launch collectives, they never wait on one.
        std::lock_guard<std::mutex> compute(RankComputeMutex());
        auto loss = Loss(*net, data, begin, begin + kRowsPerRank);
        (averaging ? loss : loss * 0.5).backward();
      }
      if (sync) {
        ASSERT_TRUE(sync->Finish().ok());
      }
      sgd.step();
      if (average) {
        ASSERT_TRUE(average->Round().ok());
      }
    }
    final_params[rank] = FlattenParameters(params);
  });
  EXPECT_TRUE(torch::equal(final_params[0], final_params[1]));
  return final_params[0];
}

// A new instance (a restarted trainer) that restores the outer state saved
// after round 1 continues the hand-computed example exactly: without the
// momentum, round 2 would land elsewhere.
TEST(ParameterAveraging, RestoredOuterStateContinuesTheExample) {
  std::vector<torch::Tensor> after2(2);
  std::vector<bool> differs_without_state(2, false);
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    std::vector<torch::Tensor> params = {torch::tensor({1.0f, 2.0f}).requires_grad_(),
                                         torch::tensor({3.0f}).requires_grad_()};
    ParameterAveragingOptions options = TinyBuckets(OuterKind::kNesterov);
    options.first_bucket_mib = 4.0 / (1024 * 1024);
    options.outer.lr = 0.7;
    options.outer.momentum = 0.9;
    auto set = [&](const std::vector<float>& v) {
      Assign(params[0], {v[0], v[1]});
      Assign(params[1], {v[2]});
    };
    std::vector<torch::Tensor> saved;
    {
      auto first = ParameterAveraging::Create(params, comm, options);
      ASSERT_TRUE(first.ok());
      set(kRound1[rank]);
      ASSERT_TRUE((*first)->Round().ok());
      for (const auto& t : (*first)->OuterState()) saved.push_back(t.clone());
    }
    ASSERT_FALSE(saved.empty());
    const std::vector<torch::Tensor> at_round1 = {params[0].detach().clone(), params[1].detach().clone()};
    // Restarted without the state: momentum starts from zero.
    auto fresh = ParameterAveraging::Create(params, comm, options);
    ASSERT_TRUE(fresh.ok());
    set(kRound2[rank]);
    ASSERT_TRUE((*fresh)->Round().ok());
    differs_without_state[rank] = MaxDiff(torch::cat({params[0].detach(), params[1].detach()}), T(kAnchor2)) > 1e-3;
    // Restarted with the state.
    params[0].detach().copy_(at_round1[0]);
    params[1].detach().copy_(at_round1[1]);
    auto resumed = ParameterAveraging::Create(params, comm, options);
    ASSERT_TRUE(resumed.ok());
    ASSERT_TRUE((*resumed)->RestoreOuterState(saved).ok());
    EXPECT_FALSE((*resumed)->RestoreOuterState({torch::zeros({7})}).ok());  // wrong shape: refused
    ASSERT_TRUE((*resumed)->RestoreOuterState(saved).ok());
    set(kRound2[rank]);
    ASSERT_TRUE((*resumed)->Round().ok());
    after2[rank] = torch::cat({params[0].detach(), params[1].detach()});
  });
  EXPECT_TRUE(differs_without_state[0]);
  EXPECT_LT(MaxDiff(after2[0], T(kAnchor2)), kExampleTolerance) << after2[0];
  EXPECT_TRUE(torch::equal(after2[0], after2[1]));
}

TEST(ParameterAveraging, EveryStepWithOuterNoneEqualsAllReduceSgd) {
  torch::manual_seed(17);
  Data data(2 * kSteps * kRowsPerRank);
  for (double momentum : {0.0, 0.9}) {
    torch::Tensor allreduce = TrainTwoRanks(data, /*averaging=*/false, momentum);
    torch::Tensor averaged = TrainTwoRanks(data, /*averaging=*/true, momentum);
    // Not vacuous: training moved the parameters.
    auto initial = FlattenParameters(MakeNet()->parameters());
    EXPECT_GT(MaxDiff(allreduce, initial), 1e-3) << "momentum " << momentum;
    EXPECT_LT(MaxDiff(allreduce, averaged), 1e-6) << "momentum " << momentum;
  }
}

// K local steps on different data, then a round: replicas differ between
// rounds and are bitwise identical right after each one.
void ExpectIdenticalOnlyAfterRounds(OuterKind outer, DataType compression) {
  constexpr int kEvery = 3, kRounds = 2;
  torch::manual_seed(23);
  Data data(2 * kEvery * kRounds * kRowsPerRank);
  // [rank][local step] flattened parameters, and the rounds' stats.
  std::vector<std::vector<torch::Tensor>> snapshots(2);
  std::vector<std::vector<torch::Tensor>> after_round(2);
  std::vector<int64_t> wire_bytes(2), numel(2);
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    auto net = MakeNet();
    auto params = net->parameters();
    torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1).momentum(0.9));
    auto average = ParameterAveraging::Create(params, comm, TinyBuckets(outer, compression));
    ASSERT_TRUE(average.ok()) << average.status();
    int step = 0;
    for (int round = 0; round < kRounds; ++round) {
      for (int k = 0; k < kEvery; ++k, ++step) {
        for (auto& p : params) p.mutable_grad() = torch::Tensor();
        const int64_t begin = (2 * step + rank) * kRowsPerRank;
        {
          std::lock_guard<std::mutex> compute(RankComputeMutex());
          Loss(*net, data, begin, begin + kRowsPerRank).backward();
        }
        sgd.step();
        snapshots[rank].push_back(FlattenParameters(params));
      }
      ASSERT_TRUE((*average)->Round().ok());
      after_round[rank].push_back(FlattenParameters(params));
    }
    wire_bytes[rank] = (*average)->last_round().wire_bytes;
    numel[rank] = FlattenParameters(params).numel();
  });
  for (size_t s = 0; s < snapshots[0].size(); ++s) {
    EXPECT_FALSE(torch::equal(snapshots[0][s], snapshots[1][s])) << "local step " << s;
  }
  for (int round = 0; round < kRounds; ++round) {
    EXPECT_TRUE(torch::equal(after_round[0][round], after_round[1][round])) << "round " << round;
    EXPECT_EQ(ParameterHash({after_round[0][round]}), ParameterHash({after_round[1][round]}));
  }
  const int64_t wire_size = compression == DataType::kFloat32 ? 4 : 2;
  EXPECT_EQ(wire_bytes[0], numel[0] * wire_size);
  if (outer == OuterKind::kNone) {
    // The last round's result is the mean of the two replicas it started from.
    const auto mean = (snapshots[0].back() + snapshots[1].back()) / 2;
    const double tolerance = compression == DataType::kFloat32 ? 1e-6 : compression == DataType::kFloat16 ? 1e-3 : 1e-2;
    EXPECT_LT(MaxDiff(after_round[0].back(), mean), tolerance);
  }
}

TEST(ParameterAveraging, ReplicasIdenticalAfterEachRoundAndDifferBetween) {
  ExpectIdenticalOnlyAfterRounds(OuterKind::kNone, DataType::kFloat32);
  ExpectIdenticalOnlyAfterRounds(OuterKind::kNesterov, DataType::kFloat32);
}

TEST(ParameterAveraging, CompressedWireStaysIdenticalAndClose) {
  ExpectIdenticalOnlyAfterRounds(OuterKind::kNone, DataType::kFloat16);
  ExpectIdenticalOnlyAfterRounds(OuterKind::kNone, DataType::kBFloat16);
}

TEST(ParameterAveraging, RejectsBadOptions) {
  RunGlooRanks(1, [&](int, Communicator* comm) {
    std::vector<torch::Tensor> params = {torch::zeros({3})};
    ParameterAveragingOptions no_buckets = TinyBuckets();
    no_buckets.bucket_cap_mib = 0;
    EXPECT_FALSE(ParameterAveraging::Create(params, comm, no_buckets).ok());
    EXPECT_FALSE(ParameterAveraging::Create({torch::zeros({3}, torch::kDouble)}, comm, TinyBuckets()).ok());
  });
}

}  // namespace
}  // namespace herd
