#include "client/progress.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace herd::client {
namespace {

v1::JobInfo RunningJob() {
  v1::JobInfo job;
  job.set_state(v1::RUNNING);
  job.set_step(420);
  job.set_total_steps(1000);
  job.set_epoch(1);
  job.set_world_size(2);
  job.set_samples_per_second(5321);
  job.set_loss(0.41234);
  (*job.mutable_eval())["accuracy"] = 0.86;
  return job;
}

TEST(ProgressTest, TtyLineWithBarPercentAndEta) {
  // 580 steps left at 10 steps/s observed: 58 s.
  EXPECT_EQ(TtyProgressLine(RunningJob(), 10, 10),
            "[####......] 42% step 420/1000 epoch 1 | 5321 samples/s | loss 0.4123 | eval accuracy 0.86 | ETA 58s");
}

TEST(ProgressTest, EtaIsUnknownWithoutARate) {
  v1::JobInfo job = RunningJob();
  job.set_samples_per_second(0);
  job.clear_eval();
  EXPECT_EQ(TtyProgressLine(job, 0, 10), "[####......] 42% step 420/1000 epoch 1 | 0 samples/s | loss 0.4123 | ETA ?");
  EXPECT_FALSE(EstimateEtaSeconds(job, 0).has_value());
}

TEST(ProgressTest, EtaFromSamplesPerSecondAndBatch) {
  v1::JobInfo job = RunningJob();
  job.set_samples_per_second(640);  // 2 workers x batch 32: 10 steps/s
  job.mutable_spec()->set_batch_size(32);
  ASSERT_TRUE(EstimateEtaSeconds(job, 0).has_value());
  EXPECT_DOUBLE_EQ(*EstimateEtaSeconds(job, 0), 58);
  // The observed step rate wins when there is one.
  EXPECT_DOUBLE_EQ(*EstimateEtaSeconds(job, 5.8), 100);
  EXPECT_THAT(TtyProgressLine(job, 0), ::testing::EndsWith("| ETA 58s"));
}

TEST(ProgressTest, UnknownTotalOmitsBarPercentAndEta) {
  v1::JobInfo job = RunningJob();
  job.set_total_steps(0);
  EXPECT_EQ(TtyProgressLine(job, 10), "step 420 epoch 1 | 5321 samples/s | loss 0.4123 | eval accuracy 0.86");
  EXPECT_EQ(PlainProgressLine(job, 10), "RUNNING step 420 epoch 1 | 5321 samples/s | loss 0.4123 | eval accuracy 0.86");
}

TEST(ProgressTest, PlainLineNamesTheState) {
  EXPECT_EQ(PlainProgressLine(RunningJob(), 10),
            "RUNNING 42% step 420/1000 epoch 1 | 5321 samples/s | loss 0.4123 | eval accuracy 0.86 | ETA 58s");
}

TEST(ProgressTest, LinesNameTheSlowestRank) {
  v1::JobInfo job = RunningJob();
  v1::Straggler* straggler = job.mutable_straggler();
  straggler->set_rank(1);
  straggler->set_worker_id("worker-1");
  straggler->set_compute_seconds_per_step(0.041);
  straggler->set_others_wait_seconds_per_step(0.021);
  straggler->set_step_seconds(0.0437);
  straggler->set_holdback_fraction(0.48);
  EXPECT_EQ(PlainProgressLine(job, 10),
            "RUNNING 42% step 420/1000 epoch 1 | 5321 samples/s | loss 0.4123 | eval accuracy 0.86 | ETA 58s | "
            "slowest rank 1 (worker-1) +21 ms/step (48%)");
  EXPECT_THAT(TtyProgressLine(job, 10), ::testing::HasSubstr("| slowest rank 1 (worker-1) +21 ms/step (48%)"));
  job.set_world_size(1);
  EXPECT_THAT(PlainProgressLine(job, 10), ::testing::Not(::testing::HasSubstr("slowest")));
}

TEST(ProgressTest, LinesShowTheCoordinatorsStorageTrouble) {
  v1::JobInfo job = RunningJob();
  job.set_storage_warning("the coordinator cannot persist this job's state since 2026-11-26 09:00:00 UTC");
  EXPECT_THAT(PlainProgressLine(job, 10),
              ::testing::EndsWith("| ETA 58s | STORAGE: the coordinator cannot persist this job's state since "
                                  "2026-11-26 09:00:00 UTC"));
  EXPECT_THAT(TtyProgressLine(job, 10), ::testing::HasSubstr("| STORAGE: the coordinator cannot persist"));
  job.set_state(v1::PENDING);
  EXPECT_THAT(PlainProgressLine(job, 0), ::testing::HasSubstr("PENDING | STORAGE: the coordinator cannot persist"));
}

TEST(ProgressTest, LinesAndSummaryShowTheWarning) {
  v1::JobInfo job = RunningJob();
  job.set_warning("unusable checkpoint skipped (j/step-0000000060: corrupt); resumed from j/step-0000000050 at step 50");
  const std::string tail =
      " | warning: unusable checkpoint skipped (j/step-0000000060: corrupt); resumed from j/step-0000000050 at step 50";
  EXPECT_THAT(TtyProgressLine(job, 10), ::testing::EndsWith(tail));
  EXPECT_THAT(PlainProgressLine(job, 10), ::testing::EndsWith(tail));
  job.set_state(v1::SUCCEEDED);
  EXPECT_THAT(FinalSummary(job), ::testing::EndsWith(tail));
}

TEST(ProgressTest, PendingShowsTheReason) {
  v1::JobInfo job;
  job.set_state(v1::PENDING);
  job.set_reason("waiting for 2 workers (have 1)");
  EXPECT_EQ(TtyProgressLine(job, 0), "PENDING: waiting for 2 workers (have 1)");
  EXPECT_EQ(PlainProgressLine(job, 0), "PENDING: waiting for 2 workers (have 1)");
}

TEST(ProgressTest, ProgressBar) {
  EXPECT_EQ(ProgressBar(0, 4), "[....]");
  EXPECT_EQ(ProgressBar(0.5, 4), "[##..]");
  EXPECT_EQ(ProgressBar(1.5, 4), "[####]");
}

TEST(ProgressTest, FinalSummary) {
  v1::JobInfo job = RunningJob();
  job.set_state(v1::SUCCEEDED);
  job.set_step(1000);
  EXPECT_EQ(FinalSummary(job), "SUCCEEDED | 1000 steps | epoch 1 | final loss 0.4123 | eval accuracy 0.86");
  job.set_state(v1::FAILED);
  job.set_reason("no workers left");
  EXPECT_THAT(FinalSummary(job), ::testing::EndsWith("| reason: no workers left"));
}

TEST(StepRateTrackerTest, RateOverTheWindowAndResetOnRollback) {
  StepRateTracker tracker(30);
  EXPECT_EQ(tracker.StepsPerSecond(), 0);
  tracker.Observe(100, 10);
  tracker.Observe(100.5, 15);
  EXPECT_EQ(tracker.StepsPerSecond(), 0);  // under a second: too noisy
  tracker.Observe(102, 30);
  EXPECT_DOUBLE_EQ(tracker.StepsPerSecond(), 10);
  tracker.Observe(103, 25);  // rolled back to a commit
  EXPECT_EQ(tracker.StepsPerSecond(), 0);
  tracker.Observe(105, 45);
  EXPECT_DOUBLE_EQ(tracker.StepsPerSecond(), 10);
}

// The ETA of a job 18% done was twice the real remaining time: the window
// counted the seconds before its first step as training.
TEST(StepRateTrackerTest, TimeBeforeTheFirstStepDoesNotCount) {
  StepRateTracker tracker(30);
  for (double t = 0; t <= 20; t += 1) tracker.Observe(t, 0);  // loading data, rendezvous
  tracker.Observe(21, 50);
  tracker.Observe(25, 250);
  EXPECT_DOUBLE_EQ(tracker.StepsPerSecond(), 50);  // 250 steps in the 5 s since step 0 was last seen
  v1::JobInfo job;
  job.set_step(250);
  job.set_total_steps(1250);
  EXPECT_DOUBLE_EQ(EstimateEtaSeconds(job, tracker.StepsPerSecond()).value(), 20);
}

}  // namespace
}  // namespace herd::client
