// Small pieces of the comm layer: type table, in-memory store, bf16 math.
#include <chrono>
#include <cmath>
#include <thread>

#include "gtest/gtest.h"
#include "worker/comm/bfloat16.h"
#include "worker/comm/communicator.h"
#include "worker/comm/in_memory_store.h"

namespace herd {
namespace {

using std::chrono::milliseconds;

TEST(DataTypeTest, SizesAndNames) {
  EXPECT_EQ(DataTypeSize(DataType::kFloat32), 4u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kBFloat16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat64), 8u);
  EXPECT_EQ(DataTypeSize(DataType::kInt64), 8u);
  EXPECT_EQ(DataTypeSize(DataType::kUInt8), 1u);
  EXPECT_STREQ(DataTypeName(DataType::kBFloat16), "bfloat16");
  EXPECT_STREQ(DataTypeName(DataType::kInt64), "int64");
}

TEST(InMemoryStoreTest, GetWaitsForALaterSet) {
  InMemoryStore store;
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(100));
    ASSERT_TRUE(store.Set("k", "v").ok());
  });
  std::string value;
  absl::Status status = store.Get("k", milliseconds(5000), &value);
  writer.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(value, "v");
}

TEST(InMemoryStoreTest, MissingKeyTimesOut) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("other", "x").ok());
  std::string value;
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = store.Get("k", milliseconds(200), &value);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("'k'"), std::string::npos) << status;
  EXPECT_GE(elapsed, milliseconds(190));
  EXPECT_LT(elapsed, milliseconds(2000));
}

TEST(InMemoryStoreTest, SetOverwrites) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("k", "1").ok());
  ASSERT_TRUE(store.Set("k", "2").ok());
  std::string value;
  ASSERT_TRUE(store.Get("k", milliseconds(0), &value).ok());
  EXPECT_EQ(value, "2");
}

TEST(BFloat16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  // Exactly halfway between 1 (even mantissa) and 1 + 2^-7: stays at 1.
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // Halfway between 1 + 2^-7 (odd) and 1 + 2^-6: goes up to the even one.
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  // Just above halfway rounds up.
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(BFloat16ToFloat(FloatToBFloat16(INFINITY))));
}

TEST(BFloat16Test, SumAddsInFloatAndRoundsOnce) {
  const uint16_t a[3] = {FloatToBFloat16(1.5f), FloatToBFloat16(-3.0f), FloatToBFloat16(256.0f)};
  const uint16_t b[3] = {FloatToBFloat16(2.25f), FloatToBFloat16(1.0f), FloatToBFloat16(1.0f)};
  uint16_t out[3];
  SumBFloat16(out, a, b, 3);
  EXPECT_EQ(BFloat16ToFloat(out[0]), 3.75f);
  EXPECT_EQ(BFloat16ToFloat(out[1]), -2.0f);
  // 257 is not representable in bf16 (8 bits of mantissa): ties to even 256.
  EXPECT_EQ(BFloat16ToFloat(out[2]), 256.0f);
  SumBFloat16(out, out, b, 1);  // in place
  EXPECT_EQ(BFloat16ToFloat(out[0]), 6.0f);
}

}  // namespace
}  // namespace herd
