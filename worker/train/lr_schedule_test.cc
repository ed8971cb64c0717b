#include "worker/train/lr_schedule.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(LrSchedule, WarmupIsLinearThenConstant) {
  v1::ScheduleSpec s;
  s.set_name("constant");
  s.set_warmup_steps(4);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0.4, 0, 100), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0.4, 3, 100), 0.4);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0.4, 50, 100), 0.4);
}

TEST(LrSchedule, CosineDecaysToFloor) {
  v1::ScheduleSpec s;
  s.set_name("cosine");
  s.set_warmup_steps(10);
  s.set_min_lr(0.01);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(LearningRateAt(s, 1.0, 60, 110), 0.505, 1e-12);  // halfway
  EXPECT_NEAR(LearningRateAt(s, 1.0, 110, 110), 0.01, 1e-12);
  EXPECT_NEAR(LearningRateAt(s, 1.0, 500, 110), 0.01, 1e-12);  // clamps past the end
}

TEST(LrSchedule, StepDecay) {
  v1::ScheduleSpec s;
  s.set_name("step");
  s.set_step_size(10);
  s.set_gamma(0.5);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 1.0, 9, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 1.0, 10, 100), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 1.0, 25, 100), 0.25);
}

}  // namespace
}  // namespace herd
