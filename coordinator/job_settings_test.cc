#include "coordinator/job_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/job_spec.h"
#include "coordinator/generations.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

class JobSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"w1", "w2", "w3"}) {
      v1::RegisterWorkerRequest request;
      request.set_worker_id(id);
      request.set_device_kind("cpu");
      UpsertWorker(state_, request, now_);
    }
    v1::JobSpec spec;
    spec.mutable_model()->set_name("mlp");
    spec.mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
    spec.set_batch_size(8);
    spec.set_min_workers(1);
    spec.set_max_workers(3);
    ApplyJobDefaults(&spec);
    ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    ChangeSet changes;
    AddPendingJob(state_, "j", spec, now_, &changes);
  }
  const JobRecord& Job() { return state_.jobs.at("j"); }

  ClusterState state_;
  double now_ = 100;
};

TEST_F(JobSettingsTest, ResizeChangesTheGivenBoundsOnly) {
  auto changes = ResizeJob(state_, "j", 0, 2, now_);
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_THAT(changes->jobs, ElementsAre("j"));
  EXPECT_EQ(Job().info.spec().min_workers(), 1);
  EXPECT_EQ(Job().info.spec().max_workers(), 2);
  ASSERT_TRUE(ResizeJob(state_, "j", 2, 0, now_).ok());
  EXPECT_EQ(Job().info.spec().min_workers(), 2);
  EXPECT_EQ(Job().info.spec().max_workers(), 2);
}

TEST_F(JobSettingsTest, ResizeValidatesNamingTheField) {
  auto bad = ResizeJob(state_, "j", 3, 2, now_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("max_workers: must be >= min_workers (3)"));
  EXPECT_EQ(Job().info.spec().max_workers(), 3);  // unchanged
  EXPECT_EQ(ResizeJob(state_, "j", -1, 0, now_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResizeJob(state_, "nope", 1, 1, now_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobSettingsTest, ShrinkingARunningJobReleasesItsHighestRanks) {
  Schedule(state_, now_);
  ASSERT_THAT(Job().generation.members, ElementsAre("w1", "w2", "w3"));
  auto changes = ResizeJob(state_, "j", 0, 1, now_);
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_THAT(Job().release_requested,
              ElementsAre(Pair("w2", ReleaseReason::kResized), Pair("w3", ReleaseReason::kResized)));
  // Asking again asks nobody twice.
  ASSERT_TRUE(ResizeJob(state_, "j", 0, 1, now_).ok());
  EXPECT_EQ(Job().release_requested.size(), 2u);
  // Growing asks nobody to leave.
  ASSERT_TRUE(ResizeJob(state_, "j", 0, 3, now_).ok());
  EXPECT_EQ(Job().release_requested.size(), 2u);
}

TEST_F(JobSettingsTest, PriorityIsValidatedAndFinalJobsRefuseChanges) {
  ASSERT_TRUE(SetJobPriority(state_, "j", 7, now_).ok());
  EXPECT_EQ(Job().info.spec().priority(), 7);
  auto bad = SetJobPriority(state_, "j", 1001, now_);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("priority: must be in [-1000, 1000]"));
  ASSERT_TRUE(CancelJob(state_, "j", now_).ok());
  EXPECT_EQ(SetJobPriority(state_, "j", 1, now_).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResizeJob(state_, "j", 1, 1, now_).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Job().info.spec().priority(), 7);
}

}  // namespace
}  // namespace herd::coordinator
