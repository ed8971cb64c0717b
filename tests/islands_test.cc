// sync.islands_by across processes: two sites of two hosts on a testbed
// (tests/testbed), each herd-worker labelled with its site. Inside a site
// the ranks all-reduce every step; between sites only the averaging rounds
// (and the coordinator's own traffic) cross the site uplinks. The job ends
// with every rank bitwise identical (the trainer checks it, and so do we).
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <regex>

#include "tests/harness/final_model.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/testbed_cluster.h"
#include "tests/testbed/testbed.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

constexpr int kSites = 2;
constexpr int kHostsPerSite = 2;
constexpr int kSteps = 40;
constexpr int kEvery = 10;

std::string IslandsJob(const std::string& sync = "outer: {kind: nesterov, lr: 0.7, momentum: 0.9}") {
  return "model: mlp\n"
         "dataset: {kind: synthetic}\n"
         "batch_size: 16\n"
         "max_steps: " + std::to_string(kSteps) + "\n" +
         "optimizer: {name: sgd, lr: 0.05}\n"
         "eval: {max_samples: 256}\n"
         "log_interval_steps: 10\n"
         "sync: {mode: average, every: " + std::to_string(kEvery) + ", warmup_steps: 0, islands_by: site,\n"
         "       " + sync + "}\n"
         "seed: 42\n"
         "min_workers: 4\nmax_workers: 4\n";
}

// A link's bytes both ways, from the root namespace's counters.
uint64_t LinkBytes(const std::string& link) {
  uint64_t total = 0;
  for (const char* way : {"rx_bytes", "tx_bytes"}) {
    std::ifstream in("/sys/class/net/" + link + "/statistics/" + way);
    uint64_t value = 0;
    in >> value;
    EXPECT_TRUE(in) << "reading " << way << " of " << link;
    total += value;
  }
  return total;
}

class Islands : public ::testing::Test {
 protected:
  void SetUp() override {
    testbed::TestbedOptions options;
    options.sites = kSites;
    options.hosts_per_site = kHostsPerSite;
    auto created = testbed::Testbed::Create(options);
    // Not a skip: CI runs as root, so a testbed that cannot be made is a failure.
    ASSERT_TRUE(created.ok()) << created.status();
    bed_ = std::move(*created);
    ClusterOptions cluster = ClusterOnTestbed(*bed_);
    for (const auto& host : bed_->hosts()) {
      cluster.worker_args.push_back({"--label", "site=" + bed_->site(host.site).name});
    }
    cluster_ = std::make_unique<LocalCluster>(cluster);
  }

  // Declared first, destroyed last: the cluster's processes stop before
  // their hosts go.
  std::unique_ptr<testbed::Testbed> bed_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(Islands, SitesAllReduceInsideAndOnlyRoundsCrossTheUplinks) {
  std::vector<uint64_t> uplink_before, hosts_before;
  for (const auto& site : bed_->sites()) uplink_before.push_back(LinkBytes(site.uplink));
  for (const auto& host : bed_->hosts()) hosts_before.push_back(LinkBytes(host.veth));

  const std::string job_id = cluster_->Submit(IslandsJob());
  auto job = cluster_->WaitForState(job_id, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster_->Logs();
  EXPECT_EQ(job.value("step", 0), kSteps);

  std::vector<SavedModel> ranks;
  for (int i = 0; i < kSites * kHostsPerSite; ++i) {
    const std::string log = ReadFile(cluster_->job_dir(i, job_id) + "/trainer.log");
    EXPECT_NE(log.find("across islands (local steps all-reduce over the island's 2 ranks; each round averages 2 "
                       "shard(s) in parallel, this rank one of them)"),
              std::string::npos)
        << "worker " << i << ":\n" << log;
    EXPECT_NE(log.find("replicas verified bitwise across 4 ranks"), std::string::npos) << "worker " << i;
    ranks.push_back(LoadFinalModel(cluster_->job_dir(i, job_id)));
  }
  ASSERT_FALSE(ranks[0].empty());
  for (size_t i = 1; i < ranks.size(); ++i) EXPECT_TRUE(DifferingTensors(ranks[0], ranks[i]).empty()) << "rank " << i;

  // Every step's all-reduce stays inside its site: a site's uplink carries
  // a small part of what its hosts' own links carry (the rounds, 1/kEvery
  // of the steps, plus the coordinator's traffic; about 1/11 on a quiet
  // machine). Were the steps summed across sites, most of it would cross.
  for (const auto& site : bed_->sites()) {
    const uint64_t uplink = LinkBytes(site.uplink) - uplink_before[site.index];
    uint64_t hosts = 0;
    for (int h : site.hosts) hosts += LinkBytes(bed_->hosts()[h].veth) - hosts_before[h];
    std::cout << site.name << ": uplink " << uplink << " bytes, its hosts' links " << hosts << " bytes\n";
    EXPECT_GT(uplink, 0u) << site.name;
    EXPECT_LT(uplink * 5, hosts) << site.name << ": uplink " << uplink << " bytes, the site's host links " << hosts;
  }
}

// A trainer's tau decisions and its final tau, as its log says them:
// "overlap_steps auto: 4 -> 3 at step 12" and the summary's
// "overlap_steps 3 (auto)".
std::vector<std::string> TauLines(const std::string& log) {
  static const std::regex line(R"(overlap_steps auto: \d+ -> \d+ at step \d+|overlap_steps \d+ \(auto\))");
  std::vector<std::string> out;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) out.push_back(it->str());
  return out;
}

// sync.overlap_steps: auto across islands: every rank of both sites
// decides the same tau at the same steps (the islands share their shard
// owners' measurements), so the sites keep one schedule and end identical.
TEST_F(Islands, OverlapStepsAutoIsOneScheduleOnEveryRank) {
  const std::string job_id =
      cluster_->Submit(IslandsJob("fragments: 2, overlap_steps: auto, compression: int8"));
  auto job = cluster_->WaitForState(job_id, {"SUCCEEDED", "FAILED"}, seconds(300));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster_->Logs();

  std::vector<SavedModel> ranks;
  std::vector<std::string> first;
  for (int i = 0; i < kSites * kHostsPerSite; ++i) {
    const std::string log = ReadFile(cluster_->job_dir(i, job_id) + "/trainer.log");
    EXPECT_NE(log.find("overlap_steps: auto, between 1 and"), std::string::npos) << "worker " << i << ":\n" << log;
    EXPECT_NE(log.find("replicas verified bitwise across 4 ranks"), std::string::npos) << "worker " << i;
    const std::vector<std::string> tau = TauLines(log);
    EXPECT_FALSE(tau.empty()) << "worker " << i << " logged no tau:\n" << log;
    if (i == 0) first = tau;
    EXPECT_EQ(tau, first) << "worker " << i << " decided otherwise than worker 0";
    ranks.push_back(LoadFinalModel(cluster_->job_dir(i, job_id)));
  }
  ASSERT_FALSE(ranks[0].empty());
  for (size_t i = 1; i < ranks.size(); ++i) EXPECT_TRUE(DifferingTensors(ranks[0], ranks[i]).empty()) << "rank " << i;
}

}  // namespace
}  // namespace herd::testing
