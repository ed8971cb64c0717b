#include "coordinator/cluster_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/clock.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr double kLease = 10;

v1::JobSpec Spec(int64_t min_workers, int64_t max_workers, const std::string& device = "cpu") {
  v1::JobSpec spec;
  spec.set_min_workers(min_workers);
  spec.set_max_workers(max_workers);
  spec.set_device(device);
  spec.mutable_checkpoint()->set_keep(2);
  return spec;
}

class ClusterStateTest : public ::testing::Test {
 protected:
  void AddWorker(const std::string& id, const std::string& device = "cpu") {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_address(id + ".local");
    request.set_device_kind(device);
    request.set_device_count(1);
    UpsertWorker(state_, request, clock_.Now());
  }
  void Submit(const std::string& id, const v1::JobSpec& spec) {
    ChangeSet changes;
    AddPendingJob(state_, id, spec, clock_.Now(), &changes);
  }
  const JobRecord& Job(const std::string& id) { return state_.jobs.at(id); }
  const WorkerRecord& Worker(const std::string& id) { return state_.workers.at(id); }
  v1::TrainerExit Exit(const std::string& job_id, int64_t generation, int code, const std::string& message = "") {
    v1::TrainerExit exit;
    exit.set_job_id(job_id);
    exit.set_generation(generation);
    exit.set_exit_code(code);
    exit.set_message(message);
    return exit;
  }
  // Two workers running job "j" as generation 1.
  void StartTwoWorkerJob() {
    AddWorker("w1");
    AddWorker("w2");
    Submit("j", Spec(2, 2));
    Schedule(state_, clock_.Now());
    ASSERT_EQ(Job("j").info.state(), v1::RUNNING);
  }

  FakeClock clock_;
  ClusterState state_;
};

TEST_F(ClusterStateTest, JobWaitsForMinWorkersThenStartsGenerationOne) {
  AddWorker("w1");
  Submit("j", Spec(2, 4));
  EXPECT_TRUE(Schedule(state_, clock_.Now()).empty());
  EXPECT_EQ(Job("j").info.state(), v1::PENDING);
  EXPECT_EQ(Worker("w1").state, v1::IDLE);

  AddWorker("w2");
  ChangeSet changes = Schedule(state_, clock_.Now());
  const JobRecord& job = Job("j");
  EXPECT_EQ(job.info.state(), v1::RUNNING);
  EXPECT_EQ(job.generation.number, 1);
  EXPECT_THAT(job.generation.members, ElementsAre("w1", "w2"));
  EXPECT_THAT(job.info.workers(), ElementsAre("w1", "w2"));
  EXPECT_EQ(job.info.world_size(), 2);
  EXPECT_EQ(job.info.generation(), 1);
  EXPECT_EQ(Worker("w1").state, v1::BUSY);
  EXPECT_EQ(Worker("w2").job_id, "j");
  ASSERT_EQ(changes.generations_started.size(), 1u);
  EXPECT_EQ(changes.generations_started[0].job_id, "j");
  EXPECT_EQ(changes.generations_started[0].number, 1);
  EXPECT_EQ(changes.jobs.count("j"), 1u);
  EXPECT_EQ(changes.workers.size(), 2u);
}

TEST_F(ClusterStateTest, TakesAtMostMaxWorkersLowestIdsFirst) {
  for (const char* id : {"w3", "w1", "w4", "w2"}) AddWorker(id);
  Submit("j", Spec(1, 3));
  Schedule(state_, clock_.Now());
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "w2", "w3"));
  EXPECT_EQ(Worker("w4").state, v1::IDLE);
  EXPECT_EQ(Job("j").generation.RankOf("w3"), 2);
  EXPECT_EQ(Job("j").generation.RankOf("w4"), -1);
}

TEST_F(ClusterStateTest, MatchesDeviceKind) {
  AddWorker("cpu1");
  Submit("gpu-job", Spec(1, 2, "cuda"));
  Schedule(state_, clock_.Now());
  EXPECT_EQ(Job("gpu-job").info.state(), v1::PENDING);

  AddWorker("gpu1", "cuda");
  Schedule(state_, clock_.Now());
  EXPECT_THAT(Job("gpu-job").generation.members, ElementsAre("gpu1"));
  EXPECT_EQ(Worker("cpu1").state, v1::IDLE);
}

TEST_F(ClusterStateTest, FirstInFirstOutWithBackfill) {
  AddWorker("w1");
  AddWorker("w2");
  // Submit order, not id order, decides who goes first.
  Submit("job-z", Spec(2, 2));
  Submit("job-a", Spec(1, 1));
  Schedule(state_, clock_.Now());
  EXPECT_EQ(Job("job-z").info.state(), v1::RUNNING);
  EXPECT_EQ(Job("job-a").info.state(), v1::PENDING);

  // A job too big for the free workers is skipped; a later one that fits starts.
  ASSERT_TRUE(CancelJob(state_, "job-z", clock_.Now()).ok());
  Submit("big", Spec(3, 3));
  Submit("small", Spec(1, 1));
  Schedule(state_, clock_.Now());
  EXPECT_EQ(Job("job-a").info.state(), v1::RUNNING);
  EXPECT_THAT(Job("job-a").generation.members, ElementsAre("w1"));
  EXPECT_EQ(Job("big").info.state(), v1::PENDING);
  EXPECT_EQ(Job("small").info.state(), v1::RUNNING);
  EXPECT_THAT(Job("small").generation.members, ElementsAre("w2"));
}

TEST_F(ClusterStateTest, LeaseExpiryFailsJobAndFreesOtherMembers) {
  StartTwoWorkerJob();
  clock_.Advance(kLease);
  state_.workers.at("w1").last_heartbeat = clock_.Now();
  // Exactly one lease old is still alive.
  EXPECT_TRUE(ExpireLeases(state_, clock_.Now(), kLease).empty());

  clock_.Advance(0.5);
  ChangeSet changes = ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_EQ(Worker("w2").state, v1::DEAD);
  EXPECT_EQ(Worker("w2").job_id, "");
  EXPECT_EQ(Job("j").info.state(), v1::FAILED);
  EXPECT_EQ(Job("j").info.reason(), "worker w2 (rank 1) lost: lease expired");
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_EQ(Worker("w1").job_id, "");
  EXPECT_EQ(changes.workers.size(), 2u);
  EXPECT_EQ(changes.jobs.count("j"), 1u);
  EXPECT_THAT(AssignmentsFor(state_, "w1"), IsEmpty());
}

TEST_F(ClusterStateTest, IdleWorkerExpiresWithoutTouchingJobs) {
  AddWorker("w1");
  clock_.Advance(kLease + 1);
  ChangeSet changes = ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_EQ(Worker("w1").state, v1::DEAD);
  EXPECT_TRUE(changes.jobs.empty());
  // A dead worker is never scheduled.
  Submit("j", Spec(1, 1));
  Schedule(state_, clock_.Now());
  EXPECT_EQ(Job("j").info.state(), v1::PENDING);
}

TEST_F(ClusterStateTest, CleanExitsSucceedOnceEveryMemberFinished) {
  StartTwoWorkerJob();
  ASSERT_THAT(AssignmentsFor(state_, "w1"), ::testing::SizeIs(1));
  int64_t version = Job("j").version;

  ApplyTrainerExit(state_, "w1", Exit("j", 1, 0), clock_.Now());
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);
  EXPECT_GT(Job("j").version, version);
  EXPECT_THAT(AssignmentsFor(state_, "w1"), IsEmpty());
  ASSERT_THAT(AssignmentsFor(state_, "w2"), ::testing::SizeIs(1));
  EXPECT_EQ(AssignmentsFor(state_, "w2")[0].rank(), 1);

  ApplyTrainerExit(state_, "w2", Exit("j", 1, 0), clock_.Now());
  EXPECT_EQ(Job("j").info.state(), v1::SUCCEEDED);
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_EQ(Worker("w2").state, v1::IDLE);
}

TEST_F(ClusterStateTest, NonZeroExitFailsJobWithReason) {
  StartTwoWorkerJob();
  ApplyTrainerExit(state_, "w2", Exit("j", 1, 3, "CUDA out of memory"), clock_.Now());
  EXPECT_EQ(Job("j").info.state(), v1::FAILED);
  EXPECT_EQ(Job("j").info.reason(), "worker w2 (rank 1) trainer exited with code 3: CUDA out of memory");
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_EQ(Worker("w2").state, v1::IDLE);
}

TEST_F(ClusterStateTest, StaleGenerationAndFinalJobExitsAreIgnored) {
  StartTwoWorkerJob();
  int64_t version = Job("j").version;
  EXPECT_TRUE(ApplyTrainerExit(state_, "w1", Exit("j", 7, 1), clock_.Now()).empty());
  EXPECT_TRUE(ApplyTrainerExit(state_, "w1", Exit("unknown", 1, 1), clock_.Now()).empty());
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);
  EXPECT_EQ(Job("j").version, version);

  ASSERT_TRUE(CancelJob(state_, "j", clock_.Now()).ok());
  EXPECT_TRUE(ApplyTrainerExit(state_, "w1", Exit("j", 1, -9), clock_.Now()).empty());
  EXPECT_EQ(Job("j").info.state(), v1::CANCELLED);
  EXPECT_EQ(Job("j").info.reason(), "cancelled by user");
}

TEST_F(ClusterStateTest, CancelPendingRunningFinalAndUnknown) {
  Submit("pending", Spec(1, 1));
  ASSERT_TRUE(CancelJob(state_, "pending", clock_.Now()).ok());
  EXPECT_EQ(Job("pending").info.state(), v1::CANCELLED);

  StartTwoWorkerJob();
  auto changes = CancelJob(state_, "j", clock_.Now());
  ASSERT_TRUE(changes.ok());
  EXPECT_EQ(Job("j").info.state(), v1::CANCELLED);
  EXPECT_EQ(Job("j").info.reason(), "cancelled by user");
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_EQ(Worker("w2").state, v1::IDLE);

  auto again = CancelJob(state_, "j", clock_.Now());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()), ::testing::HasSubstr("CANCELLED"));
  EXPECT_EQ(CancelJob(state_, "nope", clock_.Now()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClusterStateTest, ReRegisteredMemberStaysBusy) {
  StartTwoWorkerJob();
  v1::RegisterWorkerRequest request;
  request.set_worker_id("w1");
  request.set_address("new-address");
  request.set_device_kind("cpu");
  UpsertWorker(state_, request, clock_.Now());
  EXPECT_EQ(Worker("w1").state, v1::BUSY);
  EXPECT_EQ(Worker("w1").address, "new-address");
  ASSERT_THAT(AssignmentsFor(state_, "w1"), ::testing::SizeIs(1));
  EXPECT_EQ(AssignmentsFor(state_, "w1")[0].generation(), 1);
}

TEST_F(ClusterStateTest, FencingNamesCurrentGeneration) {
  StartTwoWorkerJob();
  EXPECT_TRUE(CheckCurrentGeneration(state_, "j", 1).ok());
  absl::Status stale = CheckCurrentGeneration(state_, "j", 2);
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(stale.message(), "job j: generation 2 is not current (current: 1)");
  EXPECT_EQ(CheckCurrentGeneration(state_, "x", 1).code(), absl::StatusCode::kNotFound);
}

TEST_F(ClusterStateTest, ProgressFromRankZeroOnlyAndCancelledAnswer) {
  StartTwoWorkerJob();
  v1::ReportProgressRequest report;
  report.set_job_id("j");
  report.set_generation(1);
  report.set_rank(1);
  report.set_step(5);
  ChangeSet changes;
  EXPECT_FALSE(ApplyProgress(state_, report, clock_.Now(), &changes));
  EXPECT_EQ(Job("j").info.step(), 0);

  report.set_rank(0);
  report.set_loss(0.25);
  (*report.mutable_eval())["accuracy"] = 0.9;
  EXPECT_FALSE(ApplyProgress(state_, report, clock_.Now(), &changes));
  EXPECT_EQ(Job("j").info.step(), 5);
  EXPECT_DOUBLE_EQ(Job("j").info.loss(), 0.25);
  report.clear_eval();
  ApplyProgress(state_, report, clock_.Now(), &changes);
  EXPECT_DOUBLE_EQ(Job("j").info.eval().at("accuracy"), 0.9);

  ASSERT_TRUE(CancelJob(state_, "j", clock_.Now()).ok());
  report.set_step(6);
  EXPECT_TRUE(ApplyProgress(state_, report, clock_.Now(), &changes));
  EXPECT_EQ(Job("j").info.step(), 5);
}

TEST_F(ClusterStateTest, CheckpointRetentionDropsOldest) {
  auto checkpoint = [](int step) {
    v1::CheckpointInfo info;
    info.set_job_id("j");
    info.set_step(step);
    info.set_path("ckpt/" + std::to_string(step));
    return info;
  };
  EXPECT_THAT(RecordCheckpoint(state_, checkpoint(10), 2), IsEmpty());
  EXPECT_THAT(RecordCheckpoint(state_, checkpoint(20), 2), IsEmpty());
  auto dropped = RecordCheckpoint(state_, checkpoint(30), 2);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].path(), "ckpt/10");
  ASSERT_EQ(state_.checkpoints.at("j").size(), 2u);
  EXPECT_EQ(state_.checkpoints.at("j").back().step(), 30);
}

}  // namespace
}  // namespace herd::coordinator
