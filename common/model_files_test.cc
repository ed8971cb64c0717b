#include "common/model_files.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(ModelFiles, OnlyTheTwoFinalModelFilesAreFinalModelFiles) {
  EXPECT_TRUE(IsFinalModelFileName("model-final.pt"));
  EXPECT_TRUE(IsFinalModelFileName("model-final.safetensors"));
  EXPECT_FALSE(IsFinalModelFileName("trainer.log"));
  EXPECT_FALSE(IsFinalModelFileName("../model-final.pt"));
}

TEST(ModelFiles, PlainFileNamesCannotLeaveTheirFolder) {
  EXPECT_TRUE(IsPlainFileName("MANIFEST"));
  EXPECT_TRUE(IsPlainFileName("model.pt"));
  for (const char* bad : {"", ".", "..", "../x", "a/b", "/etc/passwd", "a\nb"}) {
    EXPECT_FALSE(IsPlainFileName(bad)) << bad;
  }
  EXPECT_FALSE(IsPlainFileName(std::string(256, 'a')));
}

TEST(ModelFiles, CheckpointPathsAreJobSlashStepN) {
  EXPECT_TRUE(IsCheckpointPathOf("job-1", "job-1/step-0000000040"));
  EXPECT_FALSE(IsCheckpointPathOf("job-1", "job-2/step-40"));
  EXPECT_FALSE(IsCheckpointPathOf("job-1", "job-1/step-"));
  EXPECT_FALSE(IsCheckpointPathOf("job-1", "job-1/step-4/../../x"));
  EXPECT_FALSE(IsCheckpointPathOf("job-1", "job-1/.tmp-step-4-9"));
  EXPECT_FALSE(IsCheckpointPathOf("..", "../step-4"));
  EXPECT_FALSE(IsCheckpointPathOf("", "/step-4"));
}

}  // namespace
}  // namespace herd
