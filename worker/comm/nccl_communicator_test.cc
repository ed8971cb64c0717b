// The NCCL communicator's contract, from nccl_checks.h. The GPU tests skip
// (reported as skipped, not passed) where the build has no NCCL or the
// machine no CUDA device; the others say when they apply.
#include "worker/comm/nccl_communicator.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/nccl_checks.h"
#include "worker/comm/nccl_device.h"

namespace herd {
namespace {

#define SKIP_WITHOUT_GPU()                                                  \
  do {                                                                      \
    const std::string reason = NcclChecksUnavailableReason();               \
    if (!reason.empty()) GTEST_SKIP() << "needs NCCL and a GPU: " << reason; \
  } while (0)

// NCCL allows one rank per device, so the collectives run on one GPU here and
// on every GPU in MultiGpuTest.
constexpr int kOneGpu = 1;

class NcclCollectiveTest : public ::testing::TestWithParam<DataType> {};

TEST_P(NcclCollectiveTest, AllReduceSumsExactly) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckAllReduce(kOneGpu, GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Types, NcclCollectiveTest,
                         ::testing::Values(DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                                           DataType::kFloat64, DataType::kInt64, DataType::kUInt8),
                         [](const ::testing::TestParamInfo<DataType>& info) { return DataTypeName(info.param); });

TEST(NcclCommunicatorTest, BroadcastCopiesTheRootsBytes) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckBroadcast(kOneGpu);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, AllGatherIsInRankOrder) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckAllGather(kOneGpu);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, ReduceScatterSumsEachRanksBlock) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckReduceScatter(kOneGpu);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, InPlaceReduceScatterSumsEachRanksRanges) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckReduceScatterInPlace(kOneGpu);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, BarrierCompletes) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckBarrier(kOneGpu);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, ManyOpsInFlightWaitedInOrder) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckManyOpsInFlight(kOneGpu);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, DoneTurnsTrueWithoutWait) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckDoneBecomesTrue(kOneGpu);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, OpWaitsForTheComputeStream) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckOpWaitsForComputeStream();
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, BadOptionsAreRejected) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckBadOptionsRejected();
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, BadArgumentBreaksTheCommunicator) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckBadArgumentBreaks();
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, MissingUniqueIdTimesOut) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckMissingUniqueIdTimesOut();
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, MissingPeerTimesOutSetup) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckMissingPeerTimesOutSetup();
  EXPECT_TRUE(status.ok()) << status;
}

// The two below leave a stalled stream and an aborted communicator behind,
// so they run last (gtest runs tests in file order).
TEST(NcclCommunicatorTest, HungOpTimesOutAndBreaksTheCommunicator) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckHungOpTimesOut();
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclCommunicatorTest, WatchdogBreaksTheCommunicatorWhileNobodyWaits) {
  SKIP_WITHOUT_GPU();
  const absl::Status status = CheckWatchdogBreaksWithoutWait();
  EXPECT_TRUE(status.ok()) << status;
}

TEST(NcclMultiGpuTest, CollectivesAcrossEveryGpu) {
  SKIP_WITHOUT_GPU();
  const int devices = CudaDeviceCount().value_or(0);
  if (devices < 2) GTEST_SKIP() << "needs 2+ GPUs, found " << devices;
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64,
                        DataType::kInt64}) {
    const absl::Status status = CheckAllReduce(devices, type);
    EXPECT_TRUE(status.ok()) << DataTypeName(type) << ": " << status;
  }
  for (const absl::Status& status : {CheckBroadcast(devices), CheckAllGather(devices), CheckReduceScatter(devices), CheckReduceScatterInPlace(devices), CheckBarrier(devices),
                                     CheckManyOpsInFlight(devices)}) {
    EXPECT_TRUE(status.ok()) << status;
  }
}

// Runs on machines without a GPU, in a build with NCCL: the CI case.
TEST(NcclWithoutGpuTest, CreationNamesTheDeviceAndCudasReason) {
  if (!NcclBuildStatus().ok()) GTEST_SKIP() << "built without NCCL: " << NcclBuildStatus();
  const absl::StatusOr<int> devices = CudaDeviceCount();
  if (devices.ok() && *devices > 0) GTEST_SKIP() << "this machine has a GPU; the tests above cover it";
  const absl::Status status = CheckNoGpuIsReportedClearly();
  EXPECT_TRUE(status.ok()) << status;
}

// Runs only in a build without NCCL.
TEST(NcclUnavailableTest, FactorySaysWhy) {
  if (NcclBuildStatus().ok()) GTEST_SKIP() << "built with NCCL";
  const absl::Status status = CreateNcclCommunicator(NcclOptions(), nullptr).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "herd was built without NCCL")) << status;
}

}  // namespace
}  // namespace herd
