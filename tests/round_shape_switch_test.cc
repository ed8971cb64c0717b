// int8 round shapes on a long link (worker/train/sync/round_shape.h): on a
// testbed whose hosts are 300 ms apart one way, three ranks' all-reduce
// rounds (three hops) cannot hide behind even tau = sync.every, so the job
// switches its rounds to gather (one hop), on every rank at the same step,
// and keeps its replicas bitwise equal through the switch to the end.
#include <gtest/gtest.h>

#include <regex>

#include "tests/harness/local_cluster.h"
#include "tests/harness/process.h"
#include "tests/harness/testbed_cluster.h"
#include "tests/testbed/testbed.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

constexpr int kHosts = 3;

std::string Job() {
  return "model: mlp\n"
         "dataset: {kind: synthetic}\n"
         "batch_size: 16\n"
         "max_steps: 160\n"
         "optimizer: {name: sgd, lr: 0.05}\n"
         "sync: {mode: average, every: 8, fragments: 2, overlap_steps: auto, compression: int8}\n"
         "log_interval_steps: 40\n"
         "seed: 3\n"
         "min_workers: 3\nmax_workers: 3\n"
         "collective_timeout_seconds: 120\n";
}

// The trainer's shape changes, in order: "int8 rounds: all-reduce -> gather at step 24".
std::vector<std::string> ShapeChanges(const std::string& log) {
  static const std::regex line(R"(int8 rounds: [a-z-]+ -> [a-z-]+ at step \d+)");
  std::vector<std::string> out;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) out.push_back(it->str());
  return out;
}

TEST(RoundShapeSwitch, RoundsThatTauCannotHideGatherOnEveryRankAtOnce) {
  testbed::TestbedOptions options;
  options.hosts = kHosts;
  auto bed = testbed::Testbed::Create(options);
  ASSERT_TRUE(bed.ok()) << bed.status();
  // 150 ms each way on every host's link: 300 ms host to host, one way.
  for (int h = 0; h < kHosts; ++h) {
    const absl::Status delayed = (*bed)->SetDelay(h, 150);
    ASSERT_TRUE(delayed.ok()) << delayed;
  }
  auto cluster = std::make_unique<LocalCluster>(ClusterOnTestbed(**bed));
  const std::string id = cluster->Submit(Job());
  auto job = cluster->WaitForState(id, {"SUCCEEDED", "FAILED", "CANCELLED"}, seconds(600));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster->Logs();

  std::vector<std::vector<std::string>> changes;
  for (int i = 0; i < kHosts; ++i) {
    const std::string log = ReadFile(cluster->job_dir(i, id) + "/trainer.log");
    changes.push_back(ShapeChanges(log));
    EXPECT_NE(log.find("replicas verified bitwise across 3 ranks"), std::string::npos) << log;
  }
  // A round of three hops of 300 ms cannot hide in 8 steps of a small
  // model: the first change is to gather. Whether gather is kept depends on
  // what its rounds measure; every rank decides alike either way.
  ASSERT_FALSE(changes[0].empty()) << cluster->Logs();
  EXPECT_NE(changes[0][0].find("all-reduce -> gather"), std::string::npos) << changes[0][0];
  for (int i = 1; i < kHosts; ++i) EXPECT_EQ(changes[i], changes[0]) << "worker " << i;
  // herd status shows the shape the rounds ended in.
  const std::string& last = changes[0].back();
  const std::string ended_in = last.substr(last.find("-> ") + 3, last.find(" at step") - last.find("-> ") - 3);
  ASSERT_TRUE(job.contains("sync_state")) << job.dump(2);
  EXPECT_EQ(job["sync_state"].value("round_shape", ""), ended_in) << job.dump(2);
  cluster.reset();  // processes stop before their hosts go
}

}  // namespace
}  // namespace herd::testing
