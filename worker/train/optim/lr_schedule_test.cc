#include "worker/train/optim/lr_schedule.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

LearningRatePlan Unscaled(double lr) { return LearningRatePlan{lr, 0}; }

v1::OptimizerSpec Optimizer(double lr, v1::ScaleLr scale) {
  v1::OptimizerSpec optimizer;
  optimizer.set_lr(lr);
  optimizer.set_scale_lr(scale);
  return optimizer;
}

TEST(LrSchedule, WarmupIsLinearThenConstant) {
  v1::ScheduleSpec s;
  s.set_name(v1::SCHEDULE_NAME_CONSTANT);
  s.set_warmup_steps(4);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, Unscaled(0.4), 0, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, Unscaled(0.4), 3, 100), 0.4);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, Unscaled(0.4), 50, 100), 0.4);
}

TEST(LrSchedule, CosineDecaysToFloor) {
  v1::ScheduleSpec s;
  s.set_name(v1::SCHEDULE_NAME_COSINE);
  s.set_warmup_steps(10);
  s.set_min_lr(0.01);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, Unscaled(1.0), 10, 110), 1.0);
  EXPECT_NEAR(LearningRateAt(s, Unscaled(1.0), 60, 110), 0.505, 1e-12);  // halfway
  EXPECT_NEAR(LearningRateAt(s, Unscaled(1.0), 110, 110), 0.01, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, Unscaled(1.0), 500, 110), 0.01, 1e-12);  // clamps past the end
}

TEST(LrSchedule, StepDecay) {
  v1::ScheduleSpec s;
  s.set_name(v1::SCHEDULE_NAME_STEP);
  s.set_step_size(10);
  s.set_gamma(0.5);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, Unscaled(1.0), 9, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, Unscaled(1.0), 10, 100), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, Unscaled(1.0), 25, 100), 0.25);
}

// Vaswani et al.: d_model^-0.5 * min(s^-0.5, s * warmup^-1.5), s = step + 1,
// peaking at the end of warmup, times optimizer.lr as a factor.
TEST(LrSchedule, NoamRisesThroughWarmupThenDecaysAsInverseSqrt) {
  v1::ScheduleSpec s;
  s.set_name(v1::SCHEDULE_NAME_NOAM);
  s.set_d_model(64);
  s.set_warmup_steps(100);
  const double peak = 2.0 / 8.0 / 10.0;  // factor 2, 64^-0.5 = 1/8, 100^-0.5 = 1/10
  EXPECT_NEAR(LearningRateAt(s, Unscaled(2.0), 99, 1000), peak, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, Unscaled(2.0), 0, 1000), peak / 100, 1e-12);  // linear rise: 1/100 of the peak
  EXPECT_NEAR(LearningRateAt(s, Unscaled(2.0), 49, 1000), peak / 2, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, Unscaled(2.0), 399, 1000), peak / 2, 1e-12);  // 4x the steps: half the rate
  EXPECT_LT(LearningRateAt(s, Unscaled(2.0), 400, 1000), LearningRateAt(s, Unscaled(2.0), 399, 1000));
}

TEST(LrSchedule, ScalingFollowsTheWorldSize) {
  EXPECT_DOUBLE_EQ(PlanLearningRate(Optimizer(0.1, v1::SCALE_LR_NONE), 4).base_lr, 0.1);
  EXPECT_DOUBLE_EQ(PlanLearningRate(Optimizer(0.1, v1::SCALE_LR_UNSPECIFIED), 4).base_lr, 0.1);
  EXPECT_DOUBLE_EQ(PlanLearningRate(Optimizer(0.1, v1::SCALE_LR_LINEAR), 4).base_lr, 0.4);
  EXPECT_DOUBLE_EQ(PlanLearningRate(Optimizer(0.1, v1::SCALE_LR_SQRT), 4).base_lr, 0.2);
  EXPECT_DOUBLE_EQ(PlanLearningRate(Optimizer(0.1, v1::SCALE_LR_LINEAR), 1).base_lr, 0.1);
  const v1::OptimizerSpec linear = Optimizer(0.1, v1::SCALE_LR_LINEAR);
  EXPECT_NE(PlanLearningRate(linear, 3).Describe(linear, 3).find("linear"), std::string::npos);
}

// Goyal et al.'s gradual warmup: a scaled rate ramps from the unscaled lr,
// not from 0, and reaches the scaled rate at the end of warmup.
TEST(LrSchedule, ScaledWarmupRampsFromTheUnscaledRate) {
  v1::ScheduleSpec s;
  s.set_name(v1::SCHEDULE_NAME_CONSTANT);
  s.set_warmup_steps(5);
  const LearningRatePlan plan = PlanLearningRate(Optimizer(0.1, v1::SCALE_LR_LINEAR), 3);
  EXPECT_NEAR(LearningRateAt(s, plan, 0, 100), 0.1 + 0.2 / 5, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, plan, 4, 100), 0.3, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, plan, 50, 100), 0.3, 1e-12);
  // Unscaled keeps the old ramp from 0.
  EXPECT_NEAR(LearningRateAt(s, PlanLearningRate(Optimizer(0.1, v1::SCALE_LR_NONE), 3), 0, 100), 0.02, 1e-12);
}

}  // namespace
}  // namespace herd
