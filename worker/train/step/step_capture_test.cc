#include "worker/train/step/step_capture.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace herd {
namespace {

CaptureEnvironment Capturable() {
  CaptureEnvironment env;
  env.cuda_device = true;
  env.graphs_built = true;
  env.fused_optimizer = true;
  env.nccl_backend = true;
  env.step_free_of_host_sync = true;
  return env;
}

StepEvent Rows(int64_t rows, int64_t generation) {
  StepEvent e;
  e.rows = rows;
  e.generation = generation;
  return e;
}

struct Recorder {
  std::vector<std::string> counted;
  std::vector<std::string> lines;
  StepCapture Make(bool requested, int64_t warmup = 2) {
    return StepCapture(
        requested, warmup, [this](const char* label) { counted.push_back(label); },
        [this](const std::string& line) { lines.push_back(line); });
  }
};

TEST(StepCapture, NotRequestedIsSilentAndEager) {
  Recorder r;
  StepCapture c = r.Make(false);
  EXPECT_EQ(c.StartGeneration(Capturable(), 0), CaptureFallback::kNone);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(c.Next(Rows(8, 0)).action, StepAction::kEager);
  EXPECT_TRUE(r.counted.empty());
  EXPECT_TRUE(r.lines.empty());
  EXPECT_FALSE(c.active());
}

TEST(StepCapture, CpuDeviceFallsBackCountedPerGenerationLoggedOnce) {
  Recorder r;
  StepCapture c = r.Make(true);
  CaptureEnvironment cpu;  // cpu device, nothing else
  EXPECT_EQ(c.StartGeneration(cpu, 0), CaptureFallback::kCpuDevice);
  EXPECT_EQ(c.Next(Rows(8, 0)).action, StepAction::kEager);
  EXPECT_EQ(c.StartGeneration(cpu, 1), CaptureFallback::kCpuDevice);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(c.Next(Rows(8, 1)).action, StepAction::kEager);
  EXPECT_EQ(r.counted, (std::vector<std::string>{"cpu_device", "cpu_device"}));
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_NE(r.lines[0].find("running eagerly (cpu_device)"), std::string::npos) << r.lines[0];
}

TEST(StepCapture, CapturableGenerationWarmsUpCapturesAndReplays) {
  Recorder r;
  StepCapture c = r.Make(true);
  EXPECT_EQ(c.StartGeneration(Capturable(), 3), CaptureFallback::kNone);
  std::vector<StepAction> actions;
  for (int i = 0; i < 4; ++i) actions.push_back(c.Next(Rows(8, 3)).action);
  EXPECT_EQ(actions, (std::vector<StepAction>{StepAction::kEager, StepAction::kEager, StepAction::kCapture,
                                              StepAction::kReplay}));
  // The next generation warms up again, and its capture says why.
  c.StartGeneration(Capturable(), 4);
  EXPECT_EQ(c.Next(Rows(8, 4)).action, StepAction::kEager);
  EXPECT_EQ(c.Next(Rows(8, 4)).action, StepAction::kEager);
  const StepCaptureDecision d = c.Next(Rows(8, 4));
  EXPECT_EQ(d.action, StepAction::kCapture);
  EXPECT_EQ(d.cause, CaptureCause::kGeneration);
  EXPECT_TRUE(r.counted.empty());
}

TEST(StepCapture, AFailedCaptureIsEagerForTheRestOfTheRun) {
  Recorder r;
  StepCapture c = r.Make(true, 0);
  c.StartGeneration(Capturable(), 0);
  ASSERT_EQ(c.Next(Rows(8, 0)).action, StepAction::kCapture);
  c.CaptureFailed("operation not permitted when stream is capturing");
  EXPECT_FALSE(c.active());
  EXPECT_EQ(c.Next(Rows(8, 0)).action, StepAction::kEager);
  EXPECT_EQ(c.StartGeneration(Capturable(), 1), CaptureFallback::kCaptureFailed);
  EXPECT_EQ(c.Next(Rows(8, 1)).action, StepAction::kEager);
  EXPECT_EQ(r.counted, (std::vector<std::string>{"capture_failed", "capture_failed"}));
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_NE(r.lines[0].find("operation not permitted"), std::string::npos) << r.lines[0];
}

TEST(StepCapture, FusedStepsAreSgdAdamAndAdamwWithoutAmsgrad) {
  EXPECT_TRUE(HasFusedStep(v1::OPTIMIZER_NAME_SGD, false));
  EXPECT_TRUE(HasFusedStep(v1::OPTIMIZER_NAME_ADAM, false));
  EXPECT_TRUE(HasFusedStep(v1::OPTIMIZER_NAME_ADAMW, false));
  EXPECT_FALSE(HasFusedStep(v1::OPTIMIZER_NAME_ADAMW, true));
  EXPECT_FALSE(HasFusedStep(v1::OptimizerName(9), false));
}

// What the captured path runs without a host read: one rank, one
// micro-batch, no collective forward, the plain all-reduce update. Any one
// of the others blocks capture (kStepHostSync) instead of a wrong graph.
TEST(StepCapture, StepFreeOfHostSyncOnlyForOneRankOneMicroBatchPlainUpdate) {
  EXPECT_TRUE(StepFreeOfHostSync(1, 1, false, false));
  EXPECT_FALSE(StepFreeOfHostSync(2, 1, false, false)) << "world > 1: the all-reduce waits on the host";
  EXPECT_FALSE(StepFreeOfHostSync(1, 2, false, false)) << "grad_accumulation: several micro-batches";
  EXPECT_FALSE(StepFreeOfHostSync(1, 1, true, false)) << "norm: sync_batch forward";
  EXPECT_FALSE(StepFreeOfHostSync(1, 1, false, true)) << "sync.shard_optimizer";
  CaptureEnvironment env = Capturable();
  env.world_size = 2;
  env.step_free_of_host_sync = StepFreeOfHostSync(env.world_size, 1, false, false);
  EXPECT_EQ(CaptureBlocker(env), CaptureFallback::kStepHostSync);
  EXPECT_NE(DescribeCaptureFallback(CaptureFallback::kStepHostSync).find("world > 1"), std::string::npos);
}

}  // namespace
}  // namespace herd
