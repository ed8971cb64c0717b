#include "worker/daemon/device_probe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace herd::worker {
namespace {

using ::testing::HasSubstr;

TEST(CheckOfferedGpus, CpuWorkersNeedNoGpu) { EXPECT_TRUE(CheckOfferedGpus("cpu", {}, 0, "t").ok()); }

TEST(CheckOfferedGpus, CudaWithoutAnyGpuNamesTheFlag) {
  const absl::Status s = CheckOfferedGpus("cuda", {0}, 0, "/bin/herd-trainer");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--device=cuda"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("sees no GPU"));
}

TEST(CheckOfferedGpus, IndexOutOfRangeNamesTheIndexAndWhatIsVisible) {
  EXPECT_TRUE(CheckOfferedGpus("cuda", {0, 1}, 2, "t").ok());
  const absl::Status s = CheckOfferedGpus("cuda", {0, 3}, 2, "t");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--gpus: GPU 3 does not exist (the trainer sees 2: 0..1)"));
}

// The real trainer binary of this build answers the probe; on this CPU-only
// LibTorch it sees no GPU, so --device=cuda is refused before registering.
TEST(ProbeCudaDevices, TheRealTrainerAnswers) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  ASSERT_NE(srcdir, nullptr);
  const std::string trainer = std::string(srcdir) + "/herd/worker/train/herd-trainer";
  auto visible = ProbeCudaDevices(trainer);
  ASSERT_TRUE(visible.ok()) << visible.status();
  EXPECT_GE(*visible, 0);
  if (*visible == 0) {
    EXPECT_FALSE(CheckOfferedGpus("cuda", {0}, *visible, trainer).ok());
  }
}

TEST(ProbeCudaDevices, ABinaryThatDoesNotAnswerIsAnError) {
  auto visible = ProbeCudaDevices("/bin/false");
  EXPECT_EQ(visible.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(visible.status().message()), HasSubstr("did not answer"));
}

}  // namespace
}  // namespace herd::worker
