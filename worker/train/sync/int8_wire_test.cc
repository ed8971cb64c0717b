#include "worker/train/sync/int8_wire.h"

#include <gtest/gtest.h>

#include <vector>

namespace herd {
namespace {

// One round of `world` ranks: each codes its values with the shared scale,
// the codes are summed as the uint8 all-reduce would, and the mean decoded.
// With `feedback`, each rank's rounding residual joins its next values.
torch::Tensor RoundOf(std::vector<torch::Tensor> values, std::vector<torch::Tensor>* residuals, bool feedback) {
  const int world = static_cast<int>(values.size());
  const int levels = Int8Levels(world);
  torch::Tensor scale;
  for (int r = 0; r < world; ++r) {
    if (feedback) values[r] = values[r] + (*residuals)[r];
    auto m = ChunkAbsMax(values[r]);
    scale = r == 0 ? m : torch::maximum(scale, m);
  }
  auto sum = torch::zeros({values[0].numel()}, torch::kInt32);
  for (int r = 0; r < world; ++r) {
    auto codes = torch::empty({values[r].numel()}, torch::kUInt8);
    auto decoded = torch::empty_like(values[r]);
    Int8Encode(values[r], scale, levels, codes, decoded);
    (*residuals)[r] = values[r] - decoded;
    sum += codes.to(torch::kInt32);
  }
  EXPECT_LE(sum.max().item<int>(), 255);  // the uint8 all-reduce cannot overflow
  auto mean = torch::empty({values[0].numel()});
  Int8DecodeMean(sum.to(torch::kUInt8), scale, levels, world, mean);
  return mean;
}

TEST(Int8Wire, LevelsKeepTheSumOfCodesInAByte) {
  EXPECT_EQ(Int8Levels(1), 254);
  EXPECT_EQ(Int8Levels(3), 84);
  EXPECT_EQ(Int8Levels(127), 2);
  EXPECT_EQ(Int8Levels(128), 0);
  EXPECT_EQ(Int8Chunks(1), 1);
  EXPECT_EQ(Int8Chunks(kInt8ChunkElements + 1), 2);
}

TEST(Int8Wire, ExtremesAndZeroChunksDecodeExactly) {
  const int64_t n = kInt8ChunkElements + 3;  // a second, short chunk
  auto a = torch::zeros({n});
  auto b = torch::zeros({n});
  a[0] = 2.0;   // chunk 0 scale 2
  b[1] = -2.0;  // chunk 1 stays zero everywhere
  std::vector<torch::Tensor> residuals(2, torch::zeros({n}));
  auto mean = RoundOf({a, b}, &residuals, false);
  EXPECT_FLOAT_EQ(mean[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(mean[1].item<float>(), -1.0f);
  EXPECT_EQ(mean.narrow(0, kInt8ChunkElements, 3).abs().max().item<float>(), 0.0f);
}

TEST(Int8Wire, ErrorFeedbackKeepsTheAccumulatedSumOnTheUncompressedOne) {
  torch::manual_seed(3);
  const int world = 3;
  const int64_t n = 1000;
  const int rounds = 200;
  // Scale 1 from one large element; every other value is a steady 0.2 steps
  // of the code: rounded alone it is always lost.
  const double step = 2.0 / Int8Levels(world);
  auto base = torch::full({n}, 0.2 * step);
  base[0] = 1.0;
  std::vector<torch::Tensor> with(world, torch::zeros({n})), without(world, torch::zeros({n}));
  auto exact = torch::zeros({n}), fed = torch::zeros({n}), plain = torch::zeros({n});
  for (int k = 0; k < rounds; ++k) {
    std::vector<torch::Tensor> values;
    for (int r = 0; r < world; ++r) values.push_back(base + 0.05 * step * torch::randn({n}));
    exact += (values[0] + values[1] + values[2]) / world;
    fed += RoundOf(values, &with, true);
    plain += RoundOf(values, &without, false);
  }
  // With feedback the gap is the last residuals: at most half a step each.
  const double fed_gap = (fed - exact).narrow(0, 1, n - 1).abs().max().item<double>();
  EXPECT_LE(fed_gap, 0.5 * step + 1e-4);
  // Without, the lost 0.2 steps add up round after round.
  const double plain_gap = (plain - exact).narrow(0, 1, n - 1).abs().max().item<double>();
  EXPECT_GT(plain_gap, 0.1 * step * rounds);
}

}  // namespace
}  // namespace herd
