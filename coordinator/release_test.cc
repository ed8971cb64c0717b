// Workers leaving a running job at a step boundary (release.h) and the
// released exit's handling (generations.h), on a fake clock.
#include "coordinator/release.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "coordinator/generations.h"
#include "coordinator/scheduling_policy.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr double kLease = 10;

class ReleaseTest : public ::testing::Test {
 protected:
  void AddWorker(const std::string& id) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_address(id + ".local");
    request.set_device_kind("cpu");
    request.set_device_count(1);
    UpsertWorker(state_, request, clock_.Now());
  }
  // Workers w1..wN run job "j" (min_workers..max_workers) as generation 1.
  void StartJob(int workers, int64_t min_workers, int64_t max_workers) {
    for (int i = 1; i <= workers; ++i) AddWorker("w" + std::to_string(i));
    v1::JobSpec spec;
    spec.set_min_workers(min_workers);
    spec.set_max_workers(max_workers);
    spec.set_device(v1::DEVICE_CPU);
    spec.set_restart_budget(0);  // a charged restart would fail the job
    ChangeSet changes;
    AddPendingJob(state_, "j", spec, clock_.Now(), &changes);
    Schedule(state_, clock_.Now());
    ASSERT_EQ(Job().info.state(), v1::RUNNING);
  }
  const JobRecord& Job() { return state_.jobs.at("j"); }
  const WorkerRecord& Worker(const std::string& id) { return state_.workers.at(id); }
  void Commit(int64_t step) {
    v1::ReportProgressRequest report;
    report.set_job_id("j");
    report.set_generation(Job().generation.number);
    report.set_rank(0);
    report.set_step(step);
    report.set_samples_in_epoch(step * 32);
    ChangeSet changes;
    ASSERT_FALSE(ApplyProgress(state_, report, clock_.Now(), &changes));
  }
  // `worker_id`'s trainer left generation `generation` at `step`.
  ChangeSet Released(const std::string& worker_id, int64_t generation, int64_t step) {
    v1::TrainerExit exit;
    exit.set_job_id("j");
    exit.set_generation(generation);
    exit.set_exit_code(v1::TRAINER_EXIT_RELEASED);
    exit.mutable_final_progress()->set_step(step);
    exit.mutable_final_progress()->set_samples_in_epoch(step * 32);
    return ApplyTrainerExit(state_, worker_id, exit, clock_.Now());
  }
  ChangeSet Advance() {
    GenerationOptions options;
    options.lease_seconds = kLease;
    return AdvanceGenerations(state_, clock_.Now(), options);
  }

  FakeClock clock_;
  ClusterState state_;
};

// Every member's trainer left at `step` after rank 0's checkpoint of it was
// recorded (TRAINER_EXIT_RELEASED_ALL); `first` says so first.
ChangeSet ReleasedAll(ClusterState& state, const std::string& first, int64_t generation, int64_t step,
                      double now) {
  v1::CheckpointInfo checkpoint;
  checkpoint.set_job_id("j");
  checkpoint.set_step(step);
  checkpoint.set_samples_in_epoch(step * 32);
  checkpoint.set_path("j/step-" + std::to_string(step));
  RecordCheckpoint(state, checkpoint, 2);
  v1::TrainerExit exit;
  exit.set_job_id("j");
  exit.set_generation(generation);
  exit.set_exit_code(v1::TRAINER_EXIT_RELEASED_ALL);
  exit.mutable_final_progress()->set_step(step);
  exit.mutable_final_progress()->set_samples_in_epoch(step * 32);
  return ApplyTrainerExit(state, first, exit, now);
}

TEST_F(ReleaseTest, RequestIsRecordedOnceForAnUnfinishedMemberOfARunningJob) {
  StartJob(3, 1, 3);
  ChangeSet changes = RequestRelease(state_, "j", "w2", ReleaseReason::kDrain, clock_.Now());
  EXPECT_THAT(changes.jobs, ElementsAre("j"));
  ASSERT_EQ(changes.releases_requested.size(), 1u);
  EXPECT_EQ(ReleaseReasonName(changes.releases_requested[0].reason), "drain");
  EXPECT_EQ(ReleaseReasonName(Job().release_requested.at("w2")), "drain");
  // Every member hears which rank leaves; a worker outside the job hears nothing.
  for (const char* member : {"w1", "w2", "w3"}) {
    const auto leavers = LeaversFor(state_, member);
    ASSERT_EQ(leavers.size(), 1u) << member;
    EXPECT_EQ(leavers[0].job_id(), "j");
    EXPECT_EQ(leavers[0].generation(), 1);
    EXPECT_THAT(leavers[0].ranks(), ElementsAre(1)) << member;
  }
  AddWorker("w8");
  EXPECT_THAT(LeaversFor(state_, "w8"), IsEmpty());
  // Asked again, or for someone else's job, or a job that does not exist: nothing.
  EXPECT_TRUE(RequestRelease(state_, "j", "w2", ReleaseReason::kShrink, clock_.Now()).empty());
  EXPECT_EQ(ReleaseReasonName(Job().release_requested.at("w2")), "drain");
  AddWorker("w9");
  EXPECT_TRUE(RequestRelease(state_, "j", "w9", ReleaseReason::kDrain, clock_.Now()).empty());
  EXPECT_TRUE(RequestRelease(state_, "nope", "w1", ReleaseReason::kDrain, clock_.Now()).empty());
  ASSERT_TRUE(CancelJob(state_, "j", clock_.Now()).ok());
  EXPECT_THAT(Job().release_requested, IsEmpty());
  EXPECT_TRUE(RequestRelease(state_, "j", "w1", ReleaseReason::kDrain, clock_.Now()).empty());
}

TEST_F(ReleaseTest, ReleasedExitFormsTheNextGenerationWithoutItFromTheBoundaryAtNoCost) {
  StartJob(3, 1, 3);
  Commit(10);
  RequestRelease(state_, "j", "w2", ReleaseReason::kShrink, clock_.Now());
  clock_.Advance(1);
  // Every rank committed step 12, rank 0's report of it has not arrived yet.
  ChangeSet changes = Released("w2", 1, 12);
  const Generation& next = Job().generation;
  EXPECT_EQ(next.number, 2);
  EXPECT_TRUE(next.formed);
  EXPECT_EQ(next.reason, GenerationStartReason::kReleased);
  EXPECT_THAT(next.members, ElementsAre("w1", "w3"));
  EXPECT_EQ(next.start_step, 12);
  EXPECT_EQ(Job().info.step(), 12);
  EXPECT_EQ(Job().restarts_used, 0);
  EXPECT_EQ(Job().info.state(), v1::RUNNING);
  ASSERT_EQ(changes.generations_started.size(), 1u);
  EXPECT_EQ(GenerationStartReasonName(changes.generations_started[0].reason), "released");
  EXPECT_EQ(Worker("w2").state, v1::IDLE);
  EXPECT_THAT(Job().release_requested, IsEmpty());
  EXPECT_THAT(LeaversFor(state_, "w1"), IsEmpty());
}

// An idle worker can make up for the leaver: only the drained one leaves,
// and the job re-forms with the idle one from the survivor's commit.
TEST_F(ReleaseTest, ReleaseBelowMinWorkersTakesAnIdleWorkerInstead) {
  StartJob(2, 2, 2);
  AddWorker("w3");
  Commit(5);
  ASSERT_TRUE(DrainWorker(state_, "w1", clock_.Now(), nullptr).ok());
  EXPECT_THAT(Job().release_requested, ElementsAre(::testing::Key("w1")));
  Released("w1", 1, 5);
  EXPECT_EQ(Job().info.state(), v1::RUNNING);
  EXPECT_TRUE(Job().generation.formed);
  EXPECT_THAT(Job().generation.members, ElementsAre("w2", "w3"));
  EXPECT_EQ(Job().restarts_used, 0);
}

// Without one, the members that stay could not go on (they would wait below
// min_workers, then fail): every member is asked to leave, the boundary is
// checkpointed, and the job waits PENDING, with no timeout, until workers
// are free; then it resumes from that checkpoint.
TEST_F(ReleaseTest, ReleaseBelowMinWorkersWithNoIdleWorkerTakesTheWholeJobBackToPending) {
  StartJob(2, 2, 2);
  Commit(5);
  ASSERT_TRUE(DrainWorker(state_, "w1", clock_.Now(), nullptr).ok());
  EXPECT_EQ(ReleaseReasonName(Job().release_requested.at("w2")), "drain");
  const auto leavers = LeaversFor(state_, "w2");
  ASSERT_EQ(leavers.size(), 1u);
  EXPECT_THAT(leavers[0].ranks(), ElementsAre(0, 1));
  ReleasedAll(state_, "w2", 1, 7, clock_.Now());
  EXPECT_EQ(Job().info.state(), v1::PENDING);
  EXPECT_THAT(Job().info.reason(), ::testing::HasSubstr("released at step 7 (drained)"));
  EXPECT_THAT(Job().info.reason(), ::testing::HasSubstr("j/step-7"));
  EXPECT_EQ(Job().restarts_used, 0);
  // Long past any wait for workers: still PENDING, not FAILED.
  clock_.Advance(100 * kLease);
  Advance();
  EXPECT_EQ(Job().info.state(), v1::PENDING);
  AddWorker("w3");
  Advance();
  EXPECT_EQ(Job().info.state(), v1::RUNNING);
  EXPECT_THAT(Job().generation.members, ElementsAre("w2", "w3"));  // w1 stays cordoned
  EXPECT_EQ(Job().generation.start_step, 7);
}

TEST_F(ReleaseTest, TwoReleasedAtOneBoundaryBothLeaveAlthoughTheSecondExitNamesTheOldGeneration) {
  StartJob(3, 1, 3);
  // Drained (cordoned), so neither is taken back by the job re-forming.
  ASSERT_TRUE(DrainWorker(state_, "w1", clock_.Now(), nullptr).ok());
  ASSERT_TRUE(DrainWorker(state_, "w3", clock_.Now(), nullptr).ok());
  // The survivor hears both, so both leave at its next boundary.
  const auto leavers = LeaversFor(state_, "w2");
  ASSERT_EQ(leavers.size(), 1u);
  EXPECT_THAT(leavers[0].ranks(), ElementsAre(0, 2));
  Released("w1", 1, 20);
  EXPECT_THAT(Job().generation.members, ElementsAre("w2", "w3"));
  Released("w3", 1, 20);
  EXPECT_THAT(Job().generation.members, ElementsAre("w2"));
  EXPECT_EQ(Job().generation.reason, GenerationStartReason::kReleased);
  EXPECT_EQ(Job().restarts_used, 0);
  EXPECT_EQ(Job().info.state(), v1::RUNNING);
  // A released exit nobody asked for, from an old generation, is stale.
  Released("w2", 1, 20);
  EXPECT_THAT(Job().generation.members, ElementsAre("w2"));
}

TEST_F(ReleaseTest, CordonedWorkersTakeNoNewJobUntilUncordoned) {
  AddWorker("w1");
  AddWorker("w2");
  ASSERT_TRUE(SetCordoned(state_, "w1", true).ok());
  EXPECT_TRUE(Worker("w1").ToInfo().cordoned());
  v1::JobSpec spec;
  spec.set_min_workers(2);
  spec.set_max_workers(2);
  spec.set_device(v1::DEVICE_CPU);
  ChangeSet changes;
  AddPendingJob(state_, "j", spec, clock_.Now(), &changes);
  Advance();
  EXPECT_EQ(Job().info.state(), v1::PENDING);
  ASSERT_TRUE(SetCordoned(state_, "w1", false).ok());
  Advance();
  EXPECT_EQ(Job().info.state(), v1::RUNNING);
  EXPECT_EQ(SetCordoned(state_, "nope", true).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ReleaseTest, DrainCordonsAsksEveryJobAndTheDrainedWorkerIsNotTakenBack) {
  StartJob(3, 1, 3);
  std::vector<std::string> released;
  auto changes = DrainWorker(state_, "w3", clock_.Now(), &released);
  ASSERT_TRUE(changes.ok());
  EXPECT_THAT(released, ElementsAre("j"));
  EXPECT_TRUE(Worker("w3").cordoned);
  EXPECT_EQ(ReleaseReasonName(Job().release_requested.at("w3")), "drain");
  Released("w3", 1, 30);
  EXPECT_THAT(Job().generation.members, ElementsAre("w1", "w2"));
  EXPECT_EQ(Worker("w3").state, v1::IDLE);
  // Below max_workers with an idle worker, long after: still not taken back.
  clock_.Advance(10 * kLease);
  Advance();
  EXPECT_THAT(Job().generation.members, ElementsAre("w1", "w2"));
  EXPECT_EQ(DrainWorker(state_, "nope", clock_.Now(), nullptr).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ReleaseTest, DrainingHeartbeatAsksForReleaseAndKeepsTheWorkerOffNewJobs) {
  StartJob(2, 1, 2);
  v1::HeartbeatRequest beat;
  beat.set_worker_id("w2");
  beat.add_running_jobs("j");
  beat.set_draining(true);
  ApplyHeartbeat(state_, beat, clock_.Now());
  EXPECT_TRUE(Worker("w2").draining);
  ASSERT_EQ(LeaversFor(state_, "w1").size(), 1u);
  EXPECT_THAT(LeaversFor(state_, "w1")[0].ranks(), ElementsAre(1));
  Released("w2", 1, 8);
  EXPECT_THAT(Job().generation.members, ElementsAre("w1"));
  clock_.Advance(10 * kLease);
  beat.clear_running_jobs();
  ApplyHeartbeat(state_, beat, clock_.Now());
  Advance();
  EXPECT_THAT(Job().generation.members, ElementsAre("w1"));
  // A daemon that starts again without draining is schedulable again: the
  // job is asked to re-form at its next boundary, and takes it then.
  beat.set_draining(false);
  ApplyHeartbeat(state_, beat, clock_.Now());
  EXPECT_FALSE(Worker("w2").draining);
  Advance();
  const int64_t generation = Job().generation.number;
  ASSERT_EQ(ReformJobsFor(state_, "w1").size(), 1u);
  ASSERT_TRUE(ReformAtBoundary(state_, "j", "w1", generation, clock_.Now()).ok());
  EXPECT_THAT(Job().generation.members, ElementsAre("w1", "w2"));
}

TEST_F(ReleaseTest, GrowingAsksForAReformAtTheNextBoundaryInsteadOfFencing) {
  StartJob(2, 1, 3);
  Commit(10);
  AddWorker("w3");
  clock_.Advance(kLease + 1);
  ChangeSet changes = Advance();
  // Nothing fenced: the running generation goes on until its ranks agree.
  EXPECT_EQ(Job().generation.number, 1);
  EXPECT_TRUE(changes.generations_started.empty());
  const auto asked = ReformJobsFor(state_, "w2");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].job_id(), "j");
  EXPECT_EQ(asked[0].generation(), 1);
  EXPECT_TRUE(ReformJobsFor(state_, "w3").empty());  // not a member

  // Every rank committed step 15 and joins with at_boundary; the first
  // starts the join generation, with the idle worker, from that commit.
  auto reformed = ReformAtBoundary(state_, "j", "w2", 1, clock_.Now());
  ASSERT_TRUE(reformed.ok()) << reformed.status();
  ASSERT_EQ(reformed->generations_started.size(), 1u);
  EXPECT_EQ(reformed->generations_started[0].reason, GenerationStartReason::kJoin);
  const Generation& next = Job().generation;
  EXPECT_EQ(next.number, 2);
  EXPECT_TRUE(next.formed);
  EXPECT_THAT(next.members, ElementsAre("w1", "w2", "w3"));
  EXPECT_EQ(Job().restarts_used, 0);
  EXPECT_TRUE(ReformJobsFor(state_, "w1").empty());
  // The other rank's join of the same boundary changes nothing more.
  reformed = ReformAtBoundary(state_, "j", "w1", 1, clock_.Now());
  ASSERT_TRUE(reformed.ok());
  EXPECT_TRUE(reformed->empty());
  EXPECT_EQ(Job().generation.number, 2);
  EXPECT_EQ(ReformAtBoundary(state_, "nope", "w1", 1, clock_.Now()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ReleaseTest, SuspendedJobGoesBackToPendingAtItsCheckpointedBoundaryAndResumesThere) {
  StartJob(2, 2, 2);
  Commit(10);
  RequestRelease(state_, "j", "w1", ReleaseReason::kSuspend, clock_.Now());
  RequestRelease(state_, "j", "w2", ReleaseReason::kSuspend, clock_.Now());
  ReleasedAll(state_, "w2", 1, 13, clock_.Now());
  EXPECT_EQ(Job().info.state(), v1::PENDING);
  EXPECT_EQ(Job().info.step(), 13);
  EXPECT_THAT(Job().info.reason(), ::testing::HasSubstr("suspended at step 13"));
  EXPECT_THAT(Job().info.reason(), ::testing::HasSubstr("j/step-13"));
  EXPECT_THAT(Job().generation.members, IsEmpty());
  EXPECT_THAT(Job().release_requested, IsEmpty());
  EXPECT_EQ(Job().restarts_used, 0);
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_EQ(Worker("w2").state, v1::IDLE);
  // The other rank's exit of the same boundary finds a PENDING job.
  ReleasedAll(state_, "w1", 1, 13, clock_.Now());
  EXPECT_EQ(Job().info.state(), v1::PENDING);

  // Scheduled again: a new generation from the boundary's checkpoint.
  clock_.Advance(1);
  Advance();
  EXPECT_EQ(Job().info.state(), v1::RUNNING);
  EXPECT_EQ(Job().generation.number, 2);
  EXPECT_EQ(Job().generation.start_step, 13);
}

TEST_F(ReleaseTest, DrainingEveryMemberResumesFromTheBoundaryCheckpointOnOtherWorkers) {
  StartJob(1, 1, 1);
  AddWorker("w2");
  Commit(10);
  ASSERT_TRUE(DrainWorker(state_, "w1", clock_.Now(), nullptr).ok());
  ChangeSet changes = ReleasedAll(state_, "w1", 1, 12, clock_.Now());
  EXPECT_EQ(Job().info.state(), v1::PENDING);
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  Advance();
  EXPECT_EQ(Job().info.state(), v1::RUNNING);
  EXPECT_THAT(Job().generation.members, ElementsAre("w2"));
  EXPECT_EQ(Job().generation.start_step, 12);
  EXPECT_EQ(Job().restarts_used, 0);
}

}  // namespace
}  // namespace herd::coordinator
