// Two herd-coordinator processes on one real etcd (--store=etcd://): one
// leads and serves, the other waits as a standby. The leader is frozen
// (SIGSTOP) past its lease: the standby leads and serves the jobs the first
// one accepted; the frozen one, woken, finds its lease gone and exits 3.
// A leader stopped with SIGTERM resigns, so a standby need not wait out
// the lease.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "coordinator/etcd/leadership.h"
#include "coordinator/etcd/local_etcd.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/process.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

class CoordinatorFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!coordinator::LocalEtcd::Installed()) {
      GTEST_SKIP() << coordinator::kEtcdBinary << " is missing: install Debian's etcd-server (scripts/setup.sh does)";
    }
    auto etcd = coordinator::LocalEtcd::Start(1);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    root_ = ::testing::TempDir() + "/failover";
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }

  // A coordinator on the etcd store; its ready file appears once it leads
  // and serves.
  std::unique_ptr<Process> StartCoordinator(const std::string& name) {
    return std::make_unique<Process>(
        std::vector<std::string>{LocalCluster::Binary("coordinator/herd-coordinator"),
                                 "--store=etcd://" + etcd_->endpoints()[0], "--etcd-lease-seconds=2",
                                 "--listen=127.0.0.1:0", "--metrics-listen=", "--insecure-no-auth",
                                 "--ready-file=" + Ready(name)},
        root_ + "/" + name + ".log");
  }

  std::string Ready(const std::string& name) const { return root_ + "/" + name + ".json"; }

  std::string Address(const std::string& name) const {
    return nlohmann::json::parse(ReadFile(Ready(name)))["listen"].get<std::string>();
  }

  CommandResult Herd(const std::string& name, std::vector<std::string> args) {
    args.insert(args.begin(), LocalCluster::Binary("client/herd"));
    args.insert(args.end(), {"--coordinator", Address(name)});
    return RunCommand(args, seconds(30), {"HERD_TOKEN_FILE="});
  }

  std::unique_ptr<coordinator::LocalEtcd> etcd_;
  std::string root_;
};

TEST_F(CoordinatorFailoverTest, AFrozenLeaderIsReplacedAndStepsDownWhenItWakes) {
  auto a = StartCoordinator("a");
  ASSERT_TRUE(WaitForFile(Ready("a"), seconds(30))) << a->Log();
  auto b = StartCoordinator("b");
  const std::string spec = root_ + "/job.yaml";
  {
    std::ofstream out(spec);
    out << "name: failover\nmodel: {name: mlp}\ndataset: {kind: synthetic}\nbatch_size: 8\n";
  }
  CommandResult submitted = Herd("a", {"submit", spec});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job_id = submitted.out.substr(0, submitted.out.find('\n'));
  ASSERT_FALSE(job_id.empty());
  // The standby does not serve while the leader leads.
  EXPECT_FALSE(std::filesystem::exists(Ready("b"))) << b->Log();

  a->Signal(SIGSTOP);
  ASSERT_TRUE(WaitForFile(Ready("b"), seconds(30))) << b->Log();
  CommandResult listed = Herd("b", {"list"});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find(job_id), std::string::npos) << listed.out;

  a->Signal(SIGCONT);
  std::optional<int> a_exit = a->Wait(seconds(30));
  ASSERT_TRUE(a_exit.has_value()) << a->Log();
  EXPECT_EQ(*a_exit, 3) << a->Log();
  EXPECT_NE(a->Log().find("lost the etcd leadership"), std::string::npos) << a->Log();

  // A graceful stop resigns: the key is gone at once, not after the lease.
  auto client = coordinator::EtcdClient::Connect(etcd_->endpoints());
  ASSERT_TRUE(client.ok());
  b->Signal(SIGTERM);
  std::optional<int> b_exit = b->Wait(seconds(30));
  ASSERT_TRUE(b_exit.has_value()) << b->Log();
  EXPECT_EQ(*b_exit, 0) << b->Log();
  EXPECT_EQ(*coordinator::EtcdLeadership::CurrentLeader(**client, "/herd/leader"), "");
}

}  // namespace
}  // namespace herd::testing
