#include "worker/train/step/training_position.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(AdvancedByStepTest, AStepInsideTheEpochMovesTheStepAndTheSamples) {
  const TrainingPosition after = AdvancedByStep({4, 1, 300}, 100, 1000);
  EXPECT_EQ(after.step, 5);
  EXPECT_EQ(after.epoch, 1);
  EXPECT_EQ(after.samples_in_epoch, 400);
}

TEST(AdvancedByStepTest, AStepThatUsesUpTheEpochStartsTheNextAtItsStart) {
  const TrainingPosition exact = AdvancedByStep({9, 0, 900}, 100, 1000);
  EXPECT_EQ(exact.step, 10);
  EXPECT_EQ(exact.epoch, 1);
  EXPECT_EQ(exact.samples_in_epoch, 0);
  // The sampler's last step of an epoch may be short; a longer one still ends it.
  const TrainingPosition past = AdvancedByStep({9, 0, 950}, 100, 1000);
  EXPECT_EQ(past.epoch, 1);
  EXPECT_EQ(past.samples_in_epoch, 0);
}

TEST(AdvancedByStepTest, OneShortOfTheEpochStaysInIt) {
  const TrainingPosition after = AdvancedByStep({0, 2, 0}, 999, 1000);
  EXPECT_EQ(after.epoch, 2);
  EXPECT_EQ(after.samples_in_epoch, 999);
}

TEST(DoneAtTest, EitherLimitEndsTrainingAndZeroMeansNoLimit) {
  EXPECT_FALSE(DoneAt({5, 0, 0}, 0, 0));
  EXPECT_FALSE(DoneAt({5, 0, 0}, 6, 0));
  EXPECT_TRUE(DoneAt({6, 0, 0}, 6, 0));
  EXPECT_TRUE(DoneAt({7, 0, 0}, 6, 0));
  EXPECT_FALSE(DoneAt({100, 1, 10}, 0, 2));
  EXPECT_TRUE(DoneAt({100, 2, 0}, 0, 2));
  EXPECT_TRUE(DoneAt({6, 0, 10}, 6, 2));   // steps first
  EXPECT_TRUE(DoneAt({3, 2, 0}, 6, 2));    // epochs first
}

}  // namespace
}  // namespace herd
