#include "worker/train/optim/openblas_kernels.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

// The first processor's line of this project's build machine (abridged).
constexpr char kCpuInfo[] =
    "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n"
    "flags\t\t: fpu sse sse2 ssse3 fma sse4_2 avx avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16\n"
    "processor\t: 1\nflags\t\t: fpu sse\n";

TEST(CpuFlags, ReadsTheFirstProcessorsFlags) {
  const std::set<std::string> flags = CpuFlags(kCpuInfo);
  EXPECT_EQ(flags.count("avx512f"), 1u);
  EXPECT_EQ(flags.count("fma"), 1u);
  EXPECT_EQ(flags.count("fpu"), 1u);
  EXPECT_EQ(flags.size(), 13u);
  EXPECT_TRUE(CpuFlags("processor\t: 0\n").empty());
}

TEST(BetterOpenBlasCore, GenericKernelsOnACapableCpuGetTheBestItsFlagsAllow) {
  const std::set<std::string> avx512 = CpuFlags(kCpuInfo);
  EXPECT_EQ(BetterOpenBlasCore("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(BetterOpenBlasCore("PRESCOTT", avx512), "SkylakeX");  // case as OpenBLAS versions spell it
  EXPECT_EQ(BetterOpenBlasCore("Nehalem", {"avx", "avx2", "fma"}), "Haswell");
  EXPECT_EQ(BetterOpenBlasCore("Core2", {"avx"}), "SandyBridge");
  // AVX-512 needs all four parts the SkylakeX kernels use.
  EXPECT_EQ(BetterOpenBlasCore("Prescott", {"avx512f", "avx2", "fma", "avx"}), "Haswell");
}

TEST(BetterOpenBlasCore, OpenBlassOwnChoiceStandsOtherwise) {
  const std::set<std::string> avx512 = CpuFlags(kCpuInfo);
  // A core OpenBLAS recognized, even a lesser one than the flags allow.
  EXPECT_EQ(BetterOpenBlasCore("SkylakeX", avx512), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Haswell", avx512), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Zen", avx512), std::nullopt);
  // A CPU without AVX has nothing better than its generic kernels.
  EXPECT_EQ(BetterOpenBlasCore("Prescott", {"sse", "sse2", "ssse3"}), std::nullopt);
  // Not OpenBLAS, or a name we do not know.
  EXPECT_EQ(BetterOpenBlasCore("", avx512), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("SomeFutureCore", avx512), std::nullopt);
}

}  // namespace
}  // namespace herd
