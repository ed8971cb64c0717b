#include "worker/daemon/model_file_path.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace herd::worker {
namespace {

namespace fs = std::filesystem;

class ModelFilePathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / "model_file_path_test";
    fs::remove_all(root_);
    job_dir_ = root_ / "work/jobs/job-1";
    checkpoints_ = root_ / "checkpoints";
    fs::create_directories(job_dir_);
    fs::create_directories(checkpoints_ / "job-1/step-0000000010");
    Touch(job_dir_ / "model-final.safetensors");
    Touch(job_dir_ / "trainer.log");
    Touch(checkpoints_ / "job-1/step-0000000010/MANIFEST");
    Touch(root_ / "secret");
  }
  static void Touch(const fs::path& path) { std::ofstream(path) << "x"; }
  absl::StatusOr<std::string> Path(const std::string& file, const std::string& checkpoint = "") {
    v1::LogRequest request;
    request.set_job_id("job-1");
    request.set_file(file);
    request.set_checkpoint_path(checkpoint);
    return ModelFilePath(request, "w0", job_dir_.string(), checkpoints_.string());
  }

  fs::path root_, job_dir_, checkpoints_;
};

TEST_F(ModelFilePathTest, ServesTheFinalModelAndCheckpointFiles) {
  auto model = Path("model-final.safetensors");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*model, fs::canonical(job_dir_ / "model-final.safetensors").string());
  auto manifest = Path("MANIFEST", "job-1/step-0000000010");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(*manifest, fs::canonical(checkpoints_ / "job-1/step-0000000010/MANIFEST").string());
}

TEST_F(ModelFilePathTest, AMissingFileIsNotFoundNamingWorkerAndFile) {
  auto missing = Path("model-final.pt");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_EQ(missing.status().message(), "worker w0 has no model-final.pt of job job-1");
  EXPECT_TRUE(absl::IsNotFound(Path("MANIFEST", "job-1/step-0000000020").status()));
}

TEST_F(ModelFilePathTest, NothingOutsideTheJobsFoldersIsServed) {
  EXPECT_TRUE(absl::IsPermissionDenied(Path("trainer.log").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Path("../../../secret", "job-1/step-0000000010").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Path("MANIFEST", "job-2/step-0000000010").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Path("MANIFEST", "job-1/step-1/../../..").status()));
  // A link inside the checkpoint folder that leads out of it.
  fs::create_symlink(root_ / "secret", checkpoints_ / "job-1/step-0000000010/model.pt");
  EXPECT_TRUE(absl::IsPermissionDenied(Path("model.pt", "job-1/step-0000000010").status()));
}

}  // namespace
}  // namespace herd::worker
