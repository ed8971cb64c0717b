#include "worker/daemon/identifiers.h"

#include <string>

#include "gtest/gtest.h"

namespace herd::worker {
namespace {

TEST(IdentifiersTest, JobIds) {
  EXPECT_TRUE(IsValidJobId("job-42"));
  EXPECT_TRUE(IsValidJobId(std::string(64, 'a')));
  EXPECT_FALSE(IsValidJobId(""));
  EXPECT_FALSE(IsValidJobId(std::string(65, 'a')));
  EXPECT_FALSE(IsValidJobId("../etc"));
  EXPECT_FALSE(IsValidJobId("a/b"));
  EXPECT_FALSE(IsValidJobId("Job"));
  EXPECT_FALSE(IsValidJobId("job_1"));
  EXPECT_FALSE(IsValidJobId(".."));
}

TEST(IdentifiersTest, WorkerIds) {
  EXPECT_TRUE(IsValidWorkerId("node-1.example_a"));
  EXPECT_TRUE(IsValidWorkerId(std::string(128, 'x')));
  EXPECT_FALSE(IsValidWorkerId(""));
  EXPECT_FALSE(IsValidWorkerId(std::string(129, 'x')));
  EXPECT_FALSE(IsValidWorkerId("a b"));
  EXPECT_FALSE(IsValidWorkerId("a/b"));
}

TEST(IdentifiersTest, DefaultWorkerIdJoinsHostAndWorkDirName) {
  EXPECT_EQ(DefaultWorkerId("gpu-node", "/var/lib/herd/w0/"), "gpu-node-w0");
  EXPECT_EQ(DefaultWorkerId("host", "/tmp/work dir"), "host-work-dir");
  EXPECT_EQ(DefaultWorkerId("", "/"), "worker");
  std::string long_id = DefaultWorkerId(std::string(200, 'h'), "/w");
  EXPECT_EQ(long_id.size(), 128u);
  EXPECT_TRUE(IsValidWorkerId(long_id));
}

TEST(IdentifiersTest, IncarnationsAreFreshPerCall) {
  const std::string first = NewIncarnation();
  EXPECT_TRUE(IsValidIncarnation(first)) << first;
  EXPECT_NE(NewIncarnation(), first);
  EXPECT_FALSE(IsValidIncarnation(""));
  EXPECT_FALSE(IsValidIncarnation("0123456789ABCDEF"));
  EXPECT_FALSE(IsValidIncarnation("0123456789abcde"));
}

}  // namespace
}  // namespace herd::worker
