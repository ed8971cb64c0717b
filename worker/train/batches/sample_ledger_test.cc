#include "worker/train/batches/sample_ledger.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace herd {
namespace {

TEST(SampleLedger, WritesLinesTheReplayReads) {
  const std::string dir = std::string(getenv("TEST_TMPDIR")) + "/ledger";
  std::filesystem::create_directories(dir);
  setenv(kSampleLedgerDirEnv, dir.c_str(), 1);
  {
    auto ledger = SampleLedger::FromEnvironment("job-1", "w0");
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ASSERT_NE(*ledger, nullptr);
    (*ledger)->GenerationStart(1, 0, 0, 0);
    (*ledger)->Step(1, 0, 0, {3, 1});
    (*ledger)->Step(1, 1, 0, {});
  }
  unsetenv(kSampleLedgerDirEnv);
  auto none = SampleLedger::FromEnvironment("job-1", "w0");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);

  std::vector<std::string> contents;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    contents.push_back(text.str());
  }
  ASSERT_EQ(contents.size(), 1u);
  EXPECT_EQ(std::filesystem::directory_iterator(dir)->path().filename().string().rfind("job-1.w0-", 0), 0u);
  EXPECT_EQ(contents[0], "start 1 0 0 0\nstep 1 0 0 3 1\nstep 1 1 0\n");
  auto replay = ReplayLedgers(contents);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->committed.at(0), (std::vector<int64_t>{3, 1}));
}

// Generation 2 started at step 2: generation 1's steps 2 and 3 were rolled
// back and re-run, its steps 0 and 1 stay.
TEST(ReplayLedgers, DropsStepsALaterGenerationReran) {
  const std::vector<std::string> files = {
      "start 1 0 0 0\nstep 1 0 0 0 1\nstep 1 1 0 2 3\nstep 1 2 0 4 5\nstep 1 3 0 6 7\n"
      "start 2 2 0 4\nstep 2 2 0 4 5\nstep 2 3 0 6 7\n",
      "start 1 0 0 0\nstep 1 0 0 8 9\nstep 1 1 0 10 11\nstep 1 2 0 12 13\n"};
  auto replay = ReplayLedgers(files);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_EQ(replay->rolled_back_records, 3);
  std::vector<int64_t> ids = replay->committed.at(0);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(ReplayLedgers, RejectsDisagreeingStartsAndGarbage) {
  EXPECT_EQ(ReplayLedgers({"start 2 5 0 0\n", "start 2 6 0 0\n"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReplayLedgers({"step 1 x 0 1\n"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReplayLedgers({"hello\n"}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace herd
