// Delivering an exited trainer's checkpoint records, over real checkpoint
// folders: recorded ones stay and retire what retention names, refused ones
// are removed (unless the folder holds another checkpoint now), and one the
// coordinator cannot take now waits, with those after it, for a retry.
#include "worker/daemon/unrecorded_checkpoints.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "worker/train/checkpoint/checkpoint_files.h"

namespace herd::worker {
namespace {

class UnrecordedCheckpointsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/unrecorded_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  // A real checkpoint of `step` and the record its trainer posted.
  v1::CommitCheckpointRequest Written(int64_t step, const std::string& contents = "state") {
    auto folder = WriteCheckpointFolder(root_, "job-1", step, {{"model.pt", contents}});
    EXPECT_TRUE(folder.ok()) << folder.status();
    v1::CommitCheckpointRequest record;
    record.set_job_id("job-1");
    record.set_generation(3);
    record.set_step(step);
    record.set_path(folder->relative_path);
    record.set_sha256(folder->manifest_sha256);
    return record;
  }
  std::vector<int64_t> OnDisk() {
    std::vector<int64_t> steps;
    for (const auto& folder : ListCheckpointFolders(root_, "job-1")) steps.push_back(folder.step);
    return steps;
  }
  std::string root_;
};

TEST_F(UnrecordedCheckpointsTest, RecordedStaysAndRetentionRetiresTheOldOne) {
  Written(100);
  v1::CheckpointRecords records;
  *records.add_records() = Written(200);
  UnrecordedCheckpoints pending(root_);
  pending.Add(records);
  std::vector<int64_t> sent;
  EXPECT_TRUE(pending.Deliver([&](const v1::CommitCheckpointRequest& record) {
    sent.push_back(record.step());
    v1::CommitCheckpointResponse response;
    response.mutable_checkpoint()->set_id("ckpt-200-abc");
    response.add_delete_paths("job-1/step-0000000100");
    return absl::StatusOr<v1::CommitCheckpointResponse>(response);
  }));
  EXPECT_EQ(sent, std::vector<int64_t>{200});
  EXPECT_EQ(OnDisk(), std::vector<int64_t>{200});
  EXPECT_TRUE(pending.empty());
}

TEST_F(UnrecordedCheckpointsTest, RefusedForGoodIsRemovedUnlessTheFolderWasWrittenAgain) {
  v1::CheckpointRecords records;
  *records.add_records() = Written(100);
  v1::CommitCheckpointRequest rewritten = Written(200, "first");
  Written(200, "second");  // another generation wrote step 200 again since
  *records.add_records() = rewritten;
  UnrecordedCheckpoints pending(root_);
  pending.Add(records);
  EXPECT_TRUE(pending.Deliver([](const v1::CommitCheckpointRequest&) {
    return absl::StatusOr<v1::CommitCheckpointResponse>(
        absl::FailedPreconditionError("job job-1: generation 3 is not current (current: 4)"));
  }));
  EXPECT_EQ(OnDisk(), std::vector<int64_t>{200}) << "step 100 removed, the rewritten step 200 kept";
  EXPECT_TRUE(pending.empty());
}

TEST_F(UnrecordedCheckpointsTest, UnreachableCoordinatorKeepsEveryRecordInOrderForTheRetry) {
  v1::CheckpointRecords records;
  *records.add_records() = Written(100);
  *records.add_records() = Written(200);
  UnrecordedCheckpoints pending(root_);
  pending.Add(records);
  int calls = 0;
  EXPECT_FALSE(pending.Deliver([&](const v1::CommitCheckpointRequest&) {
    ++calls;
    return absl::StatusOr<v1::CommitCheckpointResponse>(absl::UnavailableError("connection refused"));
  }));
  EXPECT_EQ(calls, 1) << "the rest wait behind the first";
  EXPECT_FALSE(pending.empty());
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{200, 100}));
  std::vector<int64_t> sent;
  EXPECT_TRUE(pending.Deliver([&](const v1::CommitCheckpointRequest& record) {
    sent.push_back(record.step());
    return absl::StatusOr<v1::CommitCheckpointResponse>(v1::CommitCheckpointResponse());
  }));
  EXPECT_EQ(sent, (std::vector<int64_t>{100, 200}));
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{200, 100}));
}

}  // namespace
}  // namespace herd::worker
