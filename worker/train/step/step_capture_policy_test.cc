#include "worker/train/step/step_capture_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace herd {
namespace {

constexpr int64_t kWarmup = 3;

CaptureEnvironment Capturable() {
  CaptureEnvironment env;
  env.cuda_device = true;
  env.graphs_built = true;
  env.fused_optimizer = true;
  env.nccl_backend = true;
  env.step_free_of_host_sync = true;
  return env;
}

StepEvent Step(int64_t rows, int64_t generation = 0, int64_t plan = 0, bool epoch_last = false) {
  StepEvent e;
  e.rows = rows;
  e.generation = generation;
  e.plan = plan;
  e.epoch_last = epoch_last;
  return e;
}

// Runs events through DecideStep and returns the actions taken.
std::vector<StepAction> RunSteps(StepCaptureState* state, const std::vector<StepEvent>& events,
                            std::vector<CaptureCause>* causes = nullptr) {
  std::vector<StepAction> actions;
  for (const auto& e : events) {
    const StepCaptureDecision d = DecideStep(*state, e, kWarmup);
    actions.push_back(d.action);
    if (causes != nullptr && d.action == StepAction::kCapture) causes->push_back(d.cause);
    *state = d.next;
  }
  return actions;
}

using A = StepAction;

TEST(CaptureBlocker, CapturableEnvironmentHasNoBlocker) {
  EXPECT_EQ(CaptureBlocker(Capturable()), CaptureFallback::kNone);
}

TEST(CaptureBlocker, EachUncapturableSettingNamesItsReason) {
  auto with = [](auto change) {
    CaptureEnvironment env = Capturable();
    change(env);
    return CaptureBlocker(env);
  };
  EXPECT_EQ(with([](auto& e) { e.cuda_device = false; }), CaptureFallback::kCpuDevice);
  EXPECT_EQ(with([](auto& e) { e.graphs_built = false; }), CaptureFallback::kNotBuilt);
  EXPECT_EQ(with([](auto& e) { e.torchscript_model = true; }), CaptureFallback::kTorchScriptModel);
  EXPECT_EQ(with([](auto& e) { e.fused_optimizer = false; }), CaptureFallback::kOptimizerNotFused);
  EXPECT_EQ(with([](auto& e) { e.world_size = 2; e.nccl_backend = false; }), CaptureFallback::kNonNcclBackend);
  EXPECT_EQ(with([](auto& e) { e.local_steps = true; }), CaptureFallback::kLocalSteps);
  EXPECT_EQ(with([](auto& e) { e.skip_step = true; }), CaptureFallback::kSkipStep);
  EXPECT_EQ(with([](auto& e) { e.step_free_of_host_sync = false; }), CaptureFallback::kStepHostSync);
  // World 1 needs no all-reduce: the backend does not matter.
  EXPECT_EQ(with([](auto& e) { e.nccl_backend = false; }), CaptureFallback::kNone);
  EXPECT_EQ(with([](auto& e) { e.world_size = 4; }), CaptureFallback::kNone);
}

TEST(CaptureBlocker, CpuDeviceComesFirstAndEveryReasonHasALabelAndLine) {
  EXPECT_EQ(CaptureBlocker(CaptureEnvironment{}), CaptureFallback::kCpuDevice);
  for (auto r : {CaptureFallback::kCpuDevice, CaptureFallback::kNotBuilt, CaptureFallback::kTorchScriptModel,
                 CaptureFallback::kOptimizerNotFused, CaptureFallback::kNonNcclBackend, CaptureFallback::kLocalSteps,
                 CaptureFallback::kSkipStep, CaptureFallback::kStepHostSync, CaptureFallback::kCaptureFailed}) {
    const std::string label = CaptureFallbackLabel(r);
    EXPECT_NE(label, "none");
    EXPECT_NE(label, "unknown");
    EXPECT_NE(DescribeCaptureFallback(r).find("running eagerly (" + label + ")"), std::string::npos) << label;
  }
}

TEST(DecideStep, CapturesAfterWarmupThenReplays) {
  StepCaptureState s;
  std::vector<CaptureCause> causes;
  EXPECT_EQ(RunSteps(&s, {Step(8), Step(8), Step(8), Step(8), Step(8), Step(8)}, &causes),
            (std::vector<A>{A::kEager, A::kEager, A::kEager, A::kCapture, A::kReplay, A::kReplay}));
  EXPECT_EQ(causes, (std::vector<CaptureCause>{CaptureCause::kWarm}));
  EXPECT_EQ(s.captures, 1);
  EXPECT_EQ(s.rows, 8);
}

TEST(DecideStep, ZeroWarmupCapturesTheFirstStep) {
  StepCaptureState s;
  const StepCaptureDecision d = DecideStep(s, Step(8), 0);
  EXPECT_EQ(d.action, A::kCapture);
}

TEST(DecideStep, NewGenerationWarmsUpAgainThenRecaptures) {
  StepCaptureState s;
  RunSteps(&s, {Step(8), Step(8), Step(8), Step(8)});
  ASSERT_TRUE(s.captured);
  std::vector<CaptureCause> causes;
  EXPECT_EQ(RunSteps(&s, {Step(8, 1), Step(8, 1), Step(8, 1), Step(8, 1), Step(8, 1)}, &causes),
            (std::vector<A>{A::kEager, A::kEager, A::kEager, A::kCapture, A::kReplay}));
  EXPECT_EQ(causes, (std::vector<CaptureCause>{CaptureCause::kGeneration}));
  EXPECT_EQ(s.generation, 1);
  EXPECT_EQ(s.captures, 2);
}

TEST(DecideStep, ReplanRecapturesAtOnce) {
  StepCaptureState s;
  RunSteps(&s, {Step(8), Step(8), Step(8), Step(8)});
  std::vector<CaptureCause> causes;
  EXPECT_EQ(RunSteps(&s, {Step(10, 0, 1), Step(10, 0, 1)}, &causes), (std::vector<A>{A::kCapture, A::kReplay}));
  EXPECT_EQ(causes, (std::vector<CaptureCause>{CaptureCause::kReplan}));
  EXPECT_EQ(s.rows, 10);
  EXPECT_EQ(s.plan, 1);
}

TEST(DecideStep, ShortLastBatchRunsEagerAndKeepsTheGraph) {
  StepCaptureState s;
  RunSteps(&s, {Step(8), Step(8), Step(8), Step(8)});
  EXPECT_EQ(RunSteps(&s, {Step(8), Step(3, 0, 0, true), Step(8), Step(8)}),
            (std::vector<A>{A::kReplay, A::kEager, A::kReplay, A::kReplay}));
  EXPECT_EQ(s.captures, 1);
}

TEST(DecideStep, ShortLastBatchDuringWarmupDoesNotCapture) {
  StepCaptureState s;
  RunSteps(&s, {Step(8), Step(8), Step(8)});  // warm now
  s.rows = 8;  // a graph of 8 rows existed before (e.g. the previous generation)
  EXPECT_EQ(DecideStep(s, Step(3, 0, 0, true), kWarmup).action, A::kEager);
}

TEST(DecideStep, PersistentShapeChangeRecaptures) {
  StepCaptureState s;
  RunSteps(&s, {Step(8), Step(8), Step(8), Step(8)});
  std::vector<CaptureCause> causes;
  // Not an epoch's end: the rows changed for good.
  EXPECT_EQ(RunSteps(&s, {Step(6), Step(6)}, &causes), (std::vector<A>{A::kCapture, A::kReplay}));
  EXPECT_EQ(causes, (std::vector<CaptureCause>{CaptureCause::kShape}));
}

TEST(DecideStep, AStepWithNoRowsOfMineRunsEager) {
  StepCaptureState s;
  RunSteps(&s, {Step(8), Step(8), Step(8), Step(8)});
  EXPECT_EQ(DecideStep(s, Step(0, 0, 0, true), kWarmup).action, A::kEager);
}

TEST(DecideStep, FallenBackStaysEagerWhateverHappens) {
  StepCaptureState s;
  RunSteps(&s, {Step(8), Step(8), Step(8), Step(8)});
  s = FallBack(s, CaptureFallback::kCaptureFailed);
  EXPECT_EQ(s.fallback, CaptureFallback::kCaptureFailed);
  EXPECT_EQ(RunSteps(&s, {Step(8), Step(8, 1), Step(8, 1), Step(8, 1), Step(8, 1), Step(9, 1, 2)}),
            (std::vector<A>(6, A::kEager)));
}

}  // namespace
}  // namespace herd
