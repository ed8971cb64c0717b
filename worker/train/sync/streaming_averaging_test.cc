// Parameter averaging's streaming parts through real (thread) ranks:
// fragments, rounds merged after further local steps, and the int8 wire.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "worker/comm/testing/gloo_test_ranks.h"
#include "worker/train/sync/int8_wire.h"
#include "worker/train/sync/parameter_averaging.h"

namespace herd {
namespace {

torch::Tensor T(const std::vector<float>& v) { return torch::tensor(v, torch::kFloat); }

void Assign(torch::Tensor& param, const torch::Tensor& values) {
  torch::NoGradGuard no_grad;
  param.copy_(values.view(param.sizes()));
}

// Four parameters of two floats each; every rank starts from the same anchor.
std::vector<torch::Tensor> FourParams() {
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 4; ++i) params.push_back(torch::tensor({1.0f * i, 1.0f * i}).requires_grad_());
  return params;
}

// One float parameter of `n` elements: the anchor every rank starts from,
// and each of `world` ranks' values after its local steps (small changes).
struct MovedReplicas {
  torch::Tensor anchor;
  std::vector<torch::Tensor> moved;
  // The largest change on any rank: it bounds every int8 chunk's scale.
  double LargestChange() const {
    double largest = 0;
    for (const auto& m : moved) largest = std::max(largest, (anchor - m).abs().max().item<double>());
    return largest;
  }
  torch::Tensor Mean() const {
    torch::Tensor sum = torch::zeros_like(anchor);
    for (const auto& m : moved) sum += m;
    return sum / static_cast<double>(moved.size());
  }
};

MovedReplicas MoveReplicas(int world, int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  MovedReplicas replicas;
  replicas.anchor = torch::randn({n});
  for (int r = 0; r < world; ++r) replicas.moved.push_back(replicas.anchor + 0.01 * torch::randn({n}));
  return replicas;
}

// int8 averaging of `params` over `comm`, started from their current values.
std::unique_ptr<ParameterAveraging> Int8Averaging(std::vector<torch::Tensor> params, Communicator* comm) {
  ParameterAveragingOptions options;
  options.int8_wire = true;
  auto averaging = ParameterAveraging::Create(std::move(params), comm, options);
  EXPECT_TRUE(averaging.ok()) << averaging.status();
  return averaging.ok() ? std::move(*averaging) : nullptr;
}

TEST(StreamingAveraging, EachFragmentSyncsOnlyItsParameters) {
  std::vector<std::vector<torch::Tensor>> after_first(2), after_second(2);
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    auto params = FourParams();
    ParameterAveragingOptions options;
    options.fragments = 2;
    auto averaging = ParameterAveraging::Create(params, comm, options);
    ASSERT_TRUE(averaging.ok()) << averaging.status();
    ASSERT_EQ((*averaging)->fragment_params(), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
    // Each rank trains its own way: rank r moves every parameter by r + 1.
    for (auto& p : params) Assign(p, p.detach() + (rank + 1));
    ASSERT_TRUE((*averaging)->Launch(0, /*keep_local_steps=*/false).ok());
    ASSERT_TRUE((*averaging)->Finish().ok());
    for (const auto& p : params) after_first[rank].push_back(p.detach().clone());
    ASSERT_TRUE((*averaging)->Launch(1, false).ok());
    ASSERT_TRUE((*averaging)->Finish().ok());
    for (const auto& p : params) after_second[rank].push_back(p.detach().clone());
    EXPECT_EQ((*averaging)->last_round().wire_bytes, 2 * 2 * 4);  // fragment 1 only
  });
  for (int i = 0; i < 4; ++i) {
    // The mean move is 1.5: fragment 0 lands on it at once, fragment 1 only in its own round.
    const bool synced_first = i < 2;
    EXPECT_EQ(torch::equal(after_first[0][i], after_first[1][i]), synced_first) << i;
    if (synced_first) {
      EXPECT_TRUE(torch::allclose(after_first[0][i], T({i + 1.5f, i + 1.5f}))) << i;
    }
    EXPECT_TRUE(torch::equal(after_second[0][i], after_second[1][i])) << i;
    EXPECT_TRUE(torch::allclose(after_second[0][i], T({i + 1.5f, i + 1.5f}))) << i;
  }
}

// Fragments are equal ranges of the flattened parameters: one large tensor
// (most of a CNN is one weight matrix) still splits, strided or not.
TEST(StreamingAveraging, AFragmentMayCutAParameter) {
  for (bool transposed : {false, true}) {
    std::vector<torch::Tensor> after(2);
    RunGlooRanks(2, [&](int rank, Communicator* comm) {
      std::vector<torch::Tensor> params = {transposed ? torch::zeros({2, 2}).t() : torch::zeros({2, 2})};
      ASSERT_EQ(params[0].is_contiguous(), !transposed);
      ParameterAveragingOptions options;
      options.fragments = 2;
      auto averaging = ParameterAveraging::Create(params, comm, options);
      ASSERT_TRUE(averaging.ok()) << averaging.status();
      ASSERT_EQ((*averaging)->fragment_params(), (std::vector<std::vector<int>>{{0}, {0}}));
      Assign(params[0], T({1.0f + rank, 2.0f + rank, 3.0f + rank, 4.0f + rank}));
      ASSERT_TRUE((*averaging)->Launch(1, false).ok());
      ASSERT_TRUE((*averaging)->Finish().ok());
      after[rank] = params[0].detach().reshape({-1}).clone();
    });
    // The second half (row 1) averaged, the first still each rank's own.
    EXPECT_TRUE(torch::equal(after[0], T({1, 2, 3.5f, 4.5f}))) << transposed << after[0];
    EXPECT_TRUE(torch::equal(after[1], T({2, 3, 3.5f, 4.5f}))) << transposed << after[1];
  }
}

TEST(StreamingAveraging, FragmentsRefuseMoreFragmentsThanElements) {
  RunGlooRanks(1, [&](int, Communicator* comm) {
    ParameterAveragingOptions options;
    options.fragments = 9;  // 8 elements
    auto averaging = ParameterAveraging::Create(FourParams(), comm, options);
    ASSERT_FALSE(averaging.ok());
    EXPECT_EQ(averaging.status().message().rfind("sync.fragments:", 0), 0u) << averaging.status();
  });
}

// Overlap: launched with the ranks at p_r, merged after each took one more
// local step d_r. The documented result: new_anchor + (p_now - p_launch),
// with new_anchor = anchor - mean(anchor - p_r) = mean(p_r) for outer none.
TEST(StreamingAveraging, OverlappedRoundKeepsTheStepsTakenWhileInFlight) {
  const std::vector<torch::Tensor> at_launch = {T({0.5f, 2.0f, 3.5f}), T({0.7f, 1.6f, 3.1f})};
  const std::vector<torch::Tensor> step = {T({0.01f, -0.02f, 0.03f}), T({-0.04f, 0.05f, 0.0f})};
  std::vector<torch::Tensor> merged(2), next_round(2);
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    std::vector<torch::Tensor> params = {T({1, 2, 3}).requires_grad_()};
    auto averaging = ParameterAveraging::Create(params, comm, ParameterAveragingOptions{});
    ASSERT_TRUE(averaging.ok()) << averaging.status();
    Assign(params[0], at_launch[rank]);
    ASSERT_TRUE((*averaging)->Launch(0, /*keep_local_steps=*/true).ok());
    EXPECT_TRUE((*averaging)->in_flight());
    Assign(params[0], params[0].detach() + step[rank]);  // the next local step, while the round runs
    ASSERT_TRUE((*averaging)->Finish().ok());
    EXPECT_FALSE((*averaging)->in_flight());
    merged[rank] = params[0].detach().clone();
    // The kept step is part of the next pseudo-gradient: a full round lands on the mean.
    ASSERT_TRUE((*averaging)->Round().ok());
    next_round[rank] = params[0].detach().clone();
  });
  const auto mean = (at_launch[0] + at_launch[1]) / 2;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(torch::allclose(merged[r], mean + step[r], 0, 1e-6)) << merged[r];
  }
  EXPECT_TRUE(torch::equal(next_round[0], next_round[1]));
  EXPECT_TRUE(torch::allclose(next_round[0], mean + (step[0] + step[1]) / 2, 0, 1e-6)) << next_round[0];
}

// overlap_steps > 1: two fragments in flight at once, each merged after
// its own tau steps, in launch order; each keeps every step taken since
// its launch.
TEST(StreamingAveraging, RoundsLandTauStepsLaterInLaunchOrder) {
  // Rank r moves parameter i by (r + 1) * (i + 1) before launches, and by
  // step[r] at every local step.
  const std::vector<float> step = {0.25f, -0.5f};
  std::vector<std::vector<torch::Tensor>> after_first(2), after_second(2);
  std::vector<int> in_flight_between(2);
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    auto params = FourParams();
    ParameterAveragingOptions options;
    options.fragments = 2;
    auto averaging = ParameterAveraging::Create(params, comm, options);
    ASSERT_TRUE(averaging.ok()) << averaging.status();
    auto local_step = [&] {
      for (auto& p : params) Assign(p, p.detach() + step[rank]);
    };
    for (int i = 0; i < 4; ++i) Assign(params[i], params[i].detach() + (rank + 1) * (i + 1));
    ASSERT_TRUE((*averaging)->Launch(0, /*keep_local_steps=*/true).ok());
    local_step();
    ASSERT_TRUE((*averaging)->Launch(1, true).ok());
    // A fragment still in flight cannot start another round.
    EXPECT_EQ((*averaging)->Launch(1, true).code(), absl::StatusCode::kFailedPrecondition);
    local_step();
    ASSERT_TRUE((*averaging)->Finish(1).ok());  // fragment 0, two steps after its launch
    in_flight_between[rank] = (*averaging)->rounds_in_flight();
    for (const auto& p : params) after_first[rank].push_back(p.detach().clone());
    local_step();
    ASSERT_TRUE((*averaging)->Finish(1).ok());  // fragment 1, two steps after its launch
    EXPECT_FALSE((*averaging)->in_flight());
    for (const auto& p : params) after_second[rank].push_back(p.detach().clone());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(in_flight_between[r], 1);
    for (int i = 0; i < 4; ++i) {
      const float start = static_cast<float>(i);
      const float mean_move = 1.5f * (i + 1);  // the mean of (r + 1) * (i + 1) over r = 0, 1
      const float own_move = (r + 1) * (i + 1);
      if (i < 2) {
        // Fragment 0: the mean at launch, plus the two steps since; then one more local step.
        EXPECT_TRUE(torch::allclose(after_first[r][i], T({1, 1}) * (start + mean_move + 2 * step[r]), 0, 1e-6))
            << r << " " << i << after_first[r][i];
        EXPECT_TRUE(torch::allclose(after_second[r][i], T({1, 1}) * (start + mean_move + 3 * step[r]), 0, 1e-6))
            << r << " " << i;
      } else {
        // Fragment 1: its own values until it lands, then the mean at its launch plus two steps.
        EXPECT_TRUE(torch::allclose(after_first[r][i], T({1, 1}) * (start + own_move + 2 * step[r]), 0, 1e-6))
            << r << " " << i;
        const float mean_at_launch = start + mean_move + (step[0] + step[1]) / 2;
        EXPECT_TRUE(torch::allclose(after_second[r][i], T({1, 1}) * (mean_at_launch + 2 * step[r]), 0, 1e-6))
            << r << " " << i << after_second[r][i];
      }
    }
  }
}

// int8 with overlap_scales: the scale all-gather runs in the background and
// Advance (or Finish) starts the data all-reduce. The round is bitwise the
// blocking one, bytes included.
TEST(StreamingAveraging, Int8ScalesExchangedInTheBackgroundGiveTheBlockingRound) {
  constexpr int kWorld = 3;
  const int64_t n = 2 * kInt8ChunkElements + 17;
  const MovedReplicas replicas = MoveReplicas(kWorld, n, 11);
  enum Way { kBlocking, kAdvanced, kFinishedDirectly };
  std::vector<std::vector<torch::Tensor>> after(3, std::vector<torch::Tensor>(kWorld));
  std::vector<std::vector<int64_t>> bytes(3, std::vector<int64_t>(kWorld));
  for (Way way : {kBlocking, kAdvanced, kFinishedDirectly}) {
    RunGlooRanks(kWorld, [&](int rank, Communicator* comm) {
      std::vector<torch::Tensor> params = {replicas.anchor.clone().requires_grad_()};
      auto averaging = Int8Averaging(params, comm);
      ASSERT_NE(averaging, nullptr);
      Assign(params[0], replicas.moved[rank]);
      ASSERT_TRUE(averaging->Launch(0, /*keep_local_steps=*/false, 1, /*overlap_scales=*/way != kBlocking).ok());
      if (way == kAdvanced) {
        ASSERT_TRUE(averaging->Advance().ok());
      }
      ASSERT_TRUE(averaging->Finish().ok());
      after[way][rank] = params[0].detach().clone();
      bytes[way][rank] = averaging->last_round().wire_bytes;
    });
  }
  for (int way : {kAdvanced, kFinishedDirectly}) {
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(torch::equal(after[way][r], after[kBlocking][r])) << way << " " << r;
      EXPECT_EQ(bytes[way][r], bytes[kBlocking][r]) << way << " " << r;
    }
  }
  EXPECT_EQ(bytes[kBlocking][0], n + Int8Chunks(n) * 4);
}

// A round carries each rank's few side floats to every rank (int8: in the
// scale exchange; otherwise after the data), and reports where its time went.
TEST(StreamingAveraging, SidePayloadsReachEveryRankWithTheRoundAndRoundsHaveTimelines) {
  for (bool int8 : {false, true}) {
    std::vector<std::vector<std::vector<float>>> payloads(3);
    std::vector<std::vector<torch::Tensor>> results(3);
    RunGlooRanks(3, [&](int rank, Communicator* comm) {
      auto params = FourParams();
      ParameterAveragingOptions options;
      options.fragments = 2;
      options.int8_wire = int8;
      auto averaging = ParameterAveraging::Create(params, comm, options);
      ASSERT_TRUE(averaging.ok()) << averaging.status();
      for (auto& p : params) Assign(p, p.detach() + (rank + 1));
      ASSERT_TRUE((*averaging)->Launch(0, /*keep_local_steps=*/true, 1, /*overlap_scales=*/true,
                                       {10.0f * rank, 10.0f * rank + 1})
                      .ok());
      ASSERT_TRUE((*averaging)->Launch(1, true, 1, true).ok());  // no payload
      ASSERT_TRUE((*averaging)->Advance().ok());
      ASSERT_TRUE((*averaging)->Finish().ok());
      payloads[rank] = (*averaging)->last_round().side_payloads;
      const auto& timelines = (*averaging)->last_round().timelines;
      ASSERT_EQ(timelines.size(), 2u);
      for (const RoundTimeline& t : timelines) {
        EXPECT_GT(t.in_flight_seconds, 0);
        EXPECT_GE(t.in_flight_seconds, t.launch_seconds);
        EXPECT_GT(t.reduce_scatter_seconds, 0);
        EXPECT_GT(t.merge_seconds, 0);
        if (int8) {
          EXPECT_GT(t.scales_seconds, 0);
        } else {
          EXPECT_EQ(t.scales_seconds, 0);
        }
      }
      for (const auto& p : params) results[rank].push_back(p.detach().clone());
    });
    const std::vector<float> expected = {0, 1, 10, 11, 20, 21};
    for (int rank = 0; rank < 3; ++rank) {
      ASSERT_EQ(payloads[rank].size(), 2u) << "int8 " << int8;
      EXPECT_EQ(payloads[rank][0], expected) << "int8 " << int8 << " rank " << rank;
      EXPECT_TRUE(payloads[rank][1].empty());
      // The payload did not disturb the round: replicas agree.
      for (size_t i = 0; i < results[rank].size(); ++i) EXPECT_TRUE(torch::equal(results[rank][i], results[0][i]));
    }
  }
}

TEST(StreamingAveraging, FullRoundRefusedWhileARoundIsInFlight) {
  RunGlooRanks(1, [&](int, Communicator* comm) {
    auto averaging = ParameterAveraging::Create(FourParams(), comm, ParameterAveragingOptions{});
    ASSERT_TRUE(averaging.ok());
    ASSERT_TRUE((*averaging)->Launch(0, true).ok());
    EXPECT_EQ((*averaging)->Round().code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE((*averaging)->Finish().ok());
  });
}

// int8: replicas bitwise identical, within half a code step of the float
// mean, one byte per element plus one float per chunk on the wire, and the
// rounding residual kept per rank (restorable, zeroed on request).
TEST(StreamingAveraging, Int8RoundAgreesBitwiseAndStaysWithinHalfAStep) {
  constexpr int kWorld = 3;
  const int64_t n = 3 * kInt8ChunkElements + 100;
  const MovedReplicas replicas = MoveReplicas(kWorld, n, 5);
  std::vector<torch::Tensor> after(kWorld), residual(kWorld);
  std::vector<int64_t> bytes(kWorld);
  RunGlooRanks(kWorld, [&](int rank, Communicator* comm) {
    std::vector<torch::Tensor> params = {replicas.anchor.clone().requires_grad_()};
    auto averaging = Int8Averaging(params, comm);
    ASSERT_NE(averaging, nullptr);
    Assign(params[0], replicas.moved[rank]);
    ASSERT_TRUE(averaging->Round().ok());
    after[rank] = params[0].detach().clone();
    bytes[rank] = averaging->last_round().wire_bytes;
    ASSERT_EQ(averaging->Residuals().size(), 1u);
    residual[rank] = averaging->Residuals()[0].clone();
    ASSERT_TRUE(averaging->RestoreResiduals({}).ok());
    EXPECT_EQ(averaging->Residuals()[0].abs().max().item<float>(), 0.0f);
    ASSERT_TRUE(averaging->RestoreResiduals({residual[rank]}).ok());
    EXPECT_TRUE(torch::equal(averaging->Residuals()[0], residual[rank]));
    EXPECT_FALSE(averaging->RestoreResiduals({torch::zeros({7})}).ok());
  });
  const double half_step = replicas.LargestChange() / Int8Levels(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(torch::equal(after[r], after[0])) << r;
    EXPECT_GT(residual[r].abs().max().item<double>(), 0) << r;
    EXPECT_LE(residual[r].abs().max().item<double>(), half_step + 1e-6) << r;
    EXPECT_EQ(bytes[r], n + Int8Chunks(n) * 4);
  }
  EXPECT_LE((after[0] - replicas.Mean()).abs().max().item<double>(), half_step + 1e-6);
}

// Gather rounds (round_shape.h): one all-gather of each rank's codes and own
// chunk scales per bucket; replicas bitwise identical, each rank coded with
// all 254 levels (finer than the shared scale's 84 at three ranks), and
// side payloads carried.
TEST(StreamingAveraging, Int8GatherRoundAgreesBitwiseIsFinerAndCarriesSidePayloads) {
  constexpr int kWorld = 3;
  const int64_t n = 2 * kInt8ChunkElements + 101;  // codes not a whole number of floats
  const MovedReplicas replicas = MoveReplicas(kWorld, n, 7);
  std::vector<torch::Tensor> after(kWorld), residual(kWorld);
  std::vector<int64_t> bytes(kWorld);
  std::vector<std::vector<float>> side(kWorld);
  RunGlooRanks(kWorld, [&](int rank, Communicator* comm) {
    std::vector<torch::Tensor> params = {replicas.anchor.clone().requires_grad_()};
    auto averaging = Int8Averaging(params, comm);
    ASSERT_NE(averaging, nullptr);
    ASSERT_TRUE(averaging->SetRoundShape(RoundShape::kGather));
    Assign(params[0], replicas.moved[rank]);
    ASSERT_TRUE(averaging->Launch(0, /*keep_local_steps=*/false, 1, /*overlap_scales=*/true, {1.0f + rank}).ok());
    ASSERT_TRUE(averaging->Finish().ok());
    after[rank] = params[0].detach().clone();
    bytes[rank] = averaging->last_round().wire_bytes;
    side[rank] = averaging->last_round().side_payloads.at(0);
    residual[rank] = averaging->Residuals()[0].clone();
    EXPECT_EQ(averaging->last_round().timelines.at(0).scales_seconds, 0) << "gather has no scale exchange";
  });
  const double largest = replicas.LargestChange();
  const double half_step = largest / Int8Levels(1);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(torch::equal(after[r], after[0])) << r;
    EXPECT_GT(residual[r].abs().max().item<double>(), 0) << r;
    EXPECT_LE(residual[r].abs().max().item<double>(), half_step + 1e-6) << r;
    // Scales and the side float, then the codes padded to whole floats.
    EXPECT_EQ(bytes[r], Int8Chunks(n) * 4 + 4 + n + 3) << r;
    EXPECT_EQ(side[r], (std::vector<float>{1, 2, 3})) << r;
  }
  EXPECT_LE((after[0] - replicas.Mean()).abs().max().item<double>(), half_step + 1e-5);
  EXPECT_LT(half_step, largest / Int8Levels(kWorld));
}

TEST(StreamingAveraging, GatherShapeIsRefusedWithoutInt8) {
  RunGlooRanks(1, [&](int, Communicator* comm) {
    auto averaging = ParameterAveraging::Create(FourParams(), comm, ParameterAveragingOptions{});
    ASSERT_TRUE(averaging.ok());
    EXPECT_FALSE((*averaging)->SetRoundShape(RoundShape::kGather));
    EXPECT_TRUE((*averaging)->SetRoundShape(RoundShape::kAllReduce));
  });
}

}  // namespace
}  // namespace herd
