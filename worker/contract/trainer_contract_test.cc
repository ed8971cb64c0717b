#include "worker/contract/trainer_contract.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace herd {
namespace {

TEST(TrainerContract, FinalReportRoundTripsAndMissingOrCorruptIsNamed) {
  const std::string dir = ::testing::TempDir() + "/trainer_contract_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = FinalReportPath(dir);
  EXPECT_EQ(ReadFinalReport(path).status().code(), absl::StatusCode::kNotFound);

  v1::ReportProgressRequest report;
  report.set_job_id("job-1");
  report.set_step(1250);
  report.set_loss(0.25);
  (*report.mutable_eval())["accuracy"] = 0.875;
  ASSERT_TRUE(WriteFinalReport(path, report).ok());
  auto read = ReadFinalReport(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->step(), 1250);
  EXPECT_EQ(read->eval().at("accuracy"), 0.875);

  std::ofstream(path, std::ios::trunc) << "\xff\xff\xff not a proto";
  auto corrupt = ReadFinalReport(path);
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(corrupt.status().message().find(path), std::string::npos);
}

TEST(TrainerContract, UnrecordedCheckpointsRoundTrip) {
  const std::string dir = ::testing::TempDir() + "/trainer_contract_unrecorded";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = UnrecordedCheckpointsPath(dir);
  EXPECT_EQ(ReadUnrecordedCheckpoints(path).status().code(), absl::StatusCode::kNotFound);
  v1::CheckpointRecords records;
  for (int64_t step : {280, 300}) {
    v1::CommitCheckpointRequest* record = records.add_records();
    record->set_job_id("job-1");
    record->set_step(step);
    record->set_path("job-1/step-" + std::to_string(step));
  }
  ASSERT_TRUE(WriteUnrecordedCheckpoints(path, records).ok());
  auto read = ReadUnrecordedCheckpoints(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->records_size(), 2);
  EXPECT_EQ(read->records(1).step(), 300);
  EXPECT_EQ(read->records(1).path(), "job-1/step-300");
  std::ofstream(path, std::ios::trunc) << "\xff\xff\xff not a proto";
  EXPECT_EQ(ReadUnrecordedCheckpoints(path).status().code(), absl::StatusCode::kDataLoss);
}

TEST(TrainerContract, FilesLiveInTheJobDir) {
  for (const std::string& path : {TrainerLogPath("/j"), TerminationMessagePath("/j"), TrainerAlivePath("/j"),
                                  MetricsSnapshotPath("/j"), FinalReportPath("/j"),
                                  UnrecordedCheckpointsPath("/j")}) {
    EXPECT_EQ(path.rfind("/j/", 0), 0u) << path;
  }
}

TEST(TrainerContract, ReformRequestNamesItsGenerationAndAbsentOrGarbageIsNone) {
  const std::string dir = ::testing::TempDir() + "/trainer_contract_reform";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = ReformRequestPath(dir);
  EXPECT_EQ(ReadReformRequest(path), 0);
  ASSERT_TRUE(WriteReformRequest(path, 17).ok());
  EXPECT_EQ(ReadReformRequest(path), 17);
  ASSERT_TRUE(WriteReformRequest(path, 18).ok());
  EXPECT_EQ(ReadReformRequest(path), 18);
  std::ofstream(path, std::ios::trunc) << "not a number";
  EXPECT_EQ(ReadReformRequest(path), 0);
}

TEST(TrainerContract, ReleaseRequestNamesTheLeavingRanksOfAGeneration) {
  const std::string dir = ::testing::TempDir() + "/trainer_contract_release";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = ReleaseRequestPath(dir);
  EXPECT_EQ(ReadReleaseRequest(path), LeaveRequest{});
  const LeaveRequest two{7, {0, 2}};
  ASSERT_TRUE(WriteReleaseRequest(path, two).ok());
  EXPECT_EQ(ReadReleaseRequest(path), two);
  const LeaveRequest one{8, {1}};
  ASSERT_TRUE(WriteReleaseRequest(path, one).ok());
  EXPECT_EQ(ReadReleaseRequest(path), one);
  // Anything but numbers, or a negative rank, asks nothing.
  for (const char* bad : {"", "x 1", "7 1 x", "7 -1", "0 1", "-3 1"}) {
    std::ofstream(path, std::ios::trunc) << bad;
    EXPECT_EQ(ReadReleaseRequest(path), LeaveRequest{}) << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace herd
