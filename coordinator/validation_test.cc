#include "coordinator/validation.h"

#include <gtest/gtest.h>

#include <cmath>

namespace herd::coordinator {
namespace {

TEST(Validation, WorkerIds) {
  EXPECT_TRUE(ValidateWorkerId("node-1.rack_2").ok());
  EXPECT_TRUE(ValidateWorkerId(std::string(128, 'a')).ok());
  EXPECT_EQ(ValidateWorkerId("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateWorkerId(std::string(129, 'a')).code(), absl::StatusCode::kInvalidArgument);
  for (const char* bad : {"a b", "a/b", "a,b", "w\n", "wörker"}) {
    absl::Status status = ValidateWorkerId(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(status.message().rfind("worker_id:", 0), 0u) << status;
  }
}

TEST(Validation, Registration) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id("w1");
  request.set_address("10.0.0.1");
  request.set_device_kind("cuda");
  request.set_device_count(8);
  EXPECT_TRUE(ValidateRegistration(request).ok());
  request.set_device_kind("tpu");
  EXPECT_EQ(ValidateRegistration(request).message(), "device_kind: unknown value 'tpu' (expected one of: cpu, cuda)");
  request.set_device_kind("cpu");
  request.clear_address();
  EXPECT_EQ(ValidateRegistration(request).message().rfind("address:", 0), 0u);
}

TEST(Validation, RegistrationLabels) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id("w1");
  request.set_address("10.0.0.1");
  request.set_device_kind("cpu");
  (*request.mutable_labels())["site"] = "us-east";
  EXPECT_TRUE(ValidateRegistration(request).ok());
  (*request.mutable_labels())["pool"] = "a\n100";
  EXPECT_EQ(ValidateRegistration(request).message(),
            "labels: value 'a\\n100' of label 'pool' may only contain letters, digits, '-', '_' and '.'");
}

TEST(Validation, Incarnation) {
  EXPECT_TRUE(ValidateIncarnation("").ok());
  EXPECT_TRUE(ValidateIncarnation("0123456789abcdef").ok());
  for (const std::string& bad : {std::string("a b"), std::string("x\n"), std::string(65, 'a')}) {
    EXPECT_EQ(ValidateIncarnation(bad).message().rfind("incarnation (x-herd-incarnation metadata):", 0), 0u) << bad;
  }
}

TEST(Validation, CheckpointPaths) {
  EXPECT_TRUE(ValidateCheckpointPath("job-1/step-100").ok());
  EXPECT_TRUE(ValidateCheckpointPath("job-1/step..100").ok());
  for (const char* bad : {"", "/etc/passwd", "..", "../x", "a/../../x", "a/.."}) {
    EXPECT_EQ(ValidateCheckpointPath(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// A diverged loss is a measurement and passes; a NaN rate or a negative count
// is malformed.
TEST(Validation, ProgressReports) {
  v1::ReportProgressRequest report;
  report.set_step(10);
  report.set_samples_per_second(100);
  report.set_learning_rate(0.1);
  report.set_loss(std::nan(""));
  (*report.mutable_eval())["loss"] = HUGE_VAL;
  EXPECT_TRUE(ValidateProgressReport(report).ok()) << ValidateProgressReport(report);
  v1::ReportProgressRequest bad = report;
  bad.set_learning_rate(std::nan(""));
  EXPECT_EQ(ValidateProgressReport(bad).message(), "learning_rate: must be a finite number >= 0, got nan");
  bad = report;
  bad.set_total_steps(-2);
  EXPECT_EQ(ValidateProgressReport(bad).message(), "total_steps: must be >= 0, got -2");
  bad = report;
  (*bad.mutable_eval())["acc\x1b[2J"] = 1;
  EXPECT_EQ(ValidateProgressReport(bad).message().rfind("eval: names must be", 0), 0u) << ValidateProgressReport(bad);
  bad = report;
  bad.set_warning(std::string(5000, 'x'));
  EXPECT_EQ(ValidateProgressReport(bad).message().rfind("warning:", 0), 0u);
}

TEST(Validation, ProgressReportFinalModel) {
  v1::ReportProgressRequest report;
  report.set_step(10);
  v1::ModelFile* file = report.add_final_model();
  file->set_name("model-final.safetensors");
  file->set_size_bytes(120);
  file->set_sha256(std::string(64, 'a'));
  EXPECT_TRUE(ValidateProgressReport(report).ok()) << ValidateProgressReport(report);
  v1::ReportProgressRequest bad = report;
  bad.mutable_final_model(0)->set_name("../../etc/passwd");
  EXPECT_EQ(ValidateProgressReport(bad).message().rfind("final_model[0].name: must be model-final.safetensors", 0), 0u)
      << ValidateProgressReport(bad);
  bad = report;
  bad.mutable_final_model(0)->set_sha256(std::string(64, 'A'));
  EXPECT_EQ(ValidateProgressReport(bad).message(), "final_model[0].sha256: must be 64 lower-case hex digits");
  bad = report;
  bad.mutable_final_model(0)->set_size_bytes(-1);
  EXPECT_EQ(ValidateProgressReport(bad).message(), "final_model[0].size_bytes: must be >= 0, got -1");
}

TEST(Validation, ProgressReportStragglers) {
  v1::ReportProgressRequest report;
  report.set_step(10);
  v1::Straggler* straggler = report.mutable_straggler();
  straggler->set_rank(2);
  straggler->set_step(10);
  straggler->set_compute_seconds_per_step(0.041);
  straggler->set_median_compute_seconds_per_step(0.02);
  straggler->set_others_wait_seconds_per_step(0.021);
  straggler->set_step_seconds(0.042);
  straggler->set_holdback_fraction(0.5);
  EXPECT_TRUE(ValidateProgressReport(report).ok()) << ValidateProgressReport(report);
  EXPECT_TRUE(ValidateRanksInWorld(report, 3).ok());
  EXPECT_EQ(ValidateRanksInWorld(report, 2).message(), "straggler.rank: must be below the world size 2, got 2");
  v1::ReportProgressRequest without = report;
  without.clear_straggler();
  EXPECT_TRUE(ValidateRanksInWorld(without, 1).ok());

  v1::ReportProgressRequest bad = report;
  bad.mutable_straggler()->set_rank(-1);
  EXPECT_EQ(ValidateProgressReport(bad).message(), "straggler.rank: must be >= 0, got -1");
  bad = report;
  bad.mutable_straggler()->set_step(-3);
  EXPECT_EQ(ValidateProgressReport(bad).message(), "straggler.step: must be >= 0, got -3");
  bad = report;
  bad.mutable_straggler()->set_compute_seconds_per_step(std::nan(""));
  EXPECT_EQ(ValidateProgressReport(bad).message(),
            "straggler.compute_seconds_per_step: must be a finite number >= 0, got nan");
  bad = report;
  bad.mutable_straggler()->set_median_compute_seconds_per_step(-0.5);
  EXPECT_EQ(ValidateProgressReport(bad).message(),
            "straggler.median_compute_seconds_per_step: must be a finite number >= 0, got -0.5");
  bad = report;
  bad.mutable_straggler()->set_others_wait_seconds_per_step(HUGE_VAL);
  EXPECT_EQ(ValidateProgressReport(bad).message(),
            "straggler.others_wait_seconds_per_step: must be a finite number >= 0, got inf");
  bad = report;
  bad.mutable_straggler()->set_step_seconds(-HUGE_VAL);
  EXPECT_EQ(ValidateProgressReport(bad).message(), "straggler.step_seconds: must be a finite number >= 0, got -inf");
  bad = report;
  bad.mutable_straggler()->set_holdback_fraction(1.5);
  EXPECT_EQ(ValidateProgressReport(bad).message(), "straggler.holdback_fraction: must be at most 1, got 1.5");
  bad = report;
  bad.mutable_straggler()->set_holdback_fraction(std::nan(""));
  EXPECT_EQ(ValidateProgressReport(bad).message(),
            "straggler.holdback_fraction: must be a finite number >= 0, got nan");
  bad = report;
  bad.mutable_straggler()->set_worker_id("worker-0");
  EXPECT_EQ(ValidateProgressReport(bad).message().rfind("straggler.worker_id:", 0), 0u);
}

TEST(Validation, ProgressReportRanks) {
  v1::ReportProgressRequest report;
  report.set_step(10);
  for (int i = 0; i < 3; ++i) {
    v1::RankInterval* rank = report.add_ranks();
    rank->set_compute_seconds_per_step(0.02 * (i + 1));
    rank->set_wait_seconds_per_step(0.01);
    rank->set_samples_per_step(64);
    rank->set_batch_share(80 - 8 * i);
  }
  EXPECT_TRUE(ValidateProgressReport(report).ok()) << ValidateProgressReport(report);
  EXPECT_TRUE(ValidateRanksInWorld(report, 3).ok());
  EXPECT_EQ(ValidateRanksInWorld(report, 2).message(), "ranks: must list every rank of the world (2) or none, got 3");
  EXPECT_EQ(ValidateRanksInWorld(report, 4).message(), "ranks: must list every rank of the world (4) or none, got 3");

  v1::ReportProgressRequest bad = report;
  bad.mutable_ranks(1)->set_wait_seconds_per_step(std::nan(""));
  EXPECT_EQ(ValidateProgressReport(bad).message(), "ranks[1].wait_seconds_per_step: must be a finite number >= 0, got nan");
  bad = report;
  bad.mutable_ranks(2)->set_compute_seconds_per_step(-1);
  EXPECT_EQ(ValidateProgressReport(bad).message(),
            "ranks[2].compute_seconds_per_step: must be a finite number >= 0, got -1");
  bad = report;
  bad.mutable_ranks(0)->set_samples_per_step(-4);
  EXPECT_EQ(ValidateProgressReport(bad).message(), "ranks[0].samples_per_step: must be >= 0, got -4");
  bad = report;
  bad.mutable_ranks(0)->set_batch_share(-1);
  EXPECT_EQ(ValidateProgressReport(bad).message(), "ranks[0].batch_share: must be >= 0, got -1");
  bad = report;
  bad.mutable_ranks(1)->set_worker_id("worker-7");
  EXPECT_EQ(ValidateProgressReport(bad).message().rfind("ranks[1].worker_id:", 0), 0u);
}

TEST(Validation, CheckpointRecords) {
  v1::CommitCheckpointRequest record;
  record.set_step(10);
  record.set_size_bytes(4096);
  record.set_sha256(std::string(64, 'a'));
  EXPECT_TRUE(ValidateCheckpointRecord(record).ok());
  record.set_epoch(-1);
  EXPECT_EQ(ValidateCheckpointRecord(record).message(), "epoch: must be >= 0, got -1");
  record.set_epoch(0);
  record.set_sha256(std::string(65, 'a'));
  EXPECT_EQ(ValidateCheckpointRecord(record).message().rfind("sha256:", 0), 0u);
}

}  // namespace
}  // namespace herd::coordinator
