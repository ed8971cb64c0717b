#include "worker/comm/float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace herd {
namespace {

TEST(Float16, EveryHalfSurvivesTheRoundTripThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float value = Float16ToFloat(half);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(Float16ToFloat(FloatToFloat16(value)))) << bits;
    } else {
      EXPECT_EQ(FloatToFloat16(value), half) << bits;
    }
  }
}

TEST(Float16, KnownValues) {
  EXPECT_EQ(Float16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(Float16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(Float16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(Float16ToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(FloatToFloat16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFloat16(65520.0f), 0x7c00);  // rounds up to inf
  EXPECT_EQ(FloatToFloat16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(FloatToFloat16(std::ldexp(1.0f, -26)), 0x0000);  // below half the smallest subnormal
}

TEST(Float16, RoundsHalfwayToEven) {
  // 1 + 2^-11 lies halfway between 1 (even) and 1 + 2^-10 (odd).
  EXPECT_EQ(FloatToFloat16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(FloatToFloat16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Halfway between the two smallest subnormals rounds to even (0).
  EXPECT_EQ(FloatToFloat16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToFloat16(3 * std::ldexp(1.0f, -25)), 0x0002);
}

TEST(Float16, SumAddsThroughFloatAndMayAlias) {
  uint16_t a[3] = {FloatToFloat16(1.5f), FloatToFloat16(-2.0f), FloatToFloat16(65504.0f)};
  const uint16_t b[3] = {FloatToFloat16(0.25f), FloatToFloat16(2.0f), FloatToFloat16(65504.0f)};
  SumFloat16(a, a, b, 3);
  EXPECT_EQ(Float16ToFloat(a[0]), 1.75f);
  EXPECT_EQ(Float16ToFloat(a[1]), 0.0f);
  EXPECT_TRUE(std::isinf(Float16ToFloat(a[2])));
}

}  // namespace
}  // namespace herd
