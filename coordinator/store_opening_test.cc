#include "coordinator/store_opening.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "coordinator/etcd/local_etcd.h"

namespace herd::coordinator {
namespace {

using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/store-opening-" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(OpenStore, StateDirAndSqlitePathTakeTheSameLock) {
  const std::string dir = FreshDir("same-lock");
  StoreOptions by_dir;
  by_dir.state_dir = dir;
  auto first = OpenStore(by_dir);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(std::filesystem::exists(dir + "/coordinator.db"));

  StoreOptions by_path;
  by_path.store = "sqlite:" + dir + "/coordinator.db";
  auto second = OpenStore(by_path);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("is in use by another coordinator"));

  first->lock.reset();
  first->store.reset();
  auto third = OpenStore(by_path);
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST(OpenStore, BadFlagsNameWhatIsWrong) {
  StoreOptions neither;
  EXPECT_THAT(OpenStore(neither).status().message(), HasSubstr("--state-dir is required"));
  StoreOptions both;
  both.state_dir = FreshDir("both");
  both.store = "sqlite:" + both.state_dir + "/x.db";
  EXPECT_THAT(OpenStore(both).status().message(), HasSubstr("give one of them"));
  StoreOptions unknown;
  unknown.store = "postgres://db";
  EXPECT_THAT(OpenStore(unknown).status().message(), HasSubstr("expected sqlite:PATH or etcd://"));
  StoreOptions root_prefix;
  root_prefix.store = "etcd://127.0.0.1:2379";
  root_prefix.etcd_prefix = "/";
  EXPECT_THAT(OpenStore(root_prefix).status().message(), HasSubstr("--etcd-prefix"));
  StoreOptions short_lease;
  short_lease.store = "etcd://127.0.0.1:2379";
  short_lease.etcd_lease_seconds = 1;
  EXPECT_THAT(OpenStore(short_lease).status().message(), HasSubstr("too short"));
}

// On etcd the opened store leads: it holds the leader key with this
// coordinator's identity, and its writes are fenced by it.
TEST(OpenStore, EtcdLeadsAndFences) {
  if (!LocalEtcd::Installed()) GTEST_SKIP() << kEtcdBinary << " is missing: scripts/setup.sh installs etcd-server";
  auto etcd = LocalEtcd::Start(1);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  StoreOptions options;
  options.store = "etcd://" + (*etcd)->endpoints()[0];
  options.etcd_prefix = "herd/test";
  options.identity = "coordinator-1";
  auto opened = OpenStore(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ASSERT_NE(opened->leadership, nullptr);
  EXPECT_EQ(opened->leadership->fence().key, "/herd/test/leader");
  auto client = EtcdClient::Connect((*etcd)->endpoints());
  ASSERT_TRUE(client.ok());
  EXPECT_EQ(*EtcdLeadership::CurrentLeader(**client, "/herd/test/leader"), "coordinator-1");
  ClusterState state;
  ChangeSet changes;
  v1::JobSpec spec;
  spec.set_name("a");
  AddPendingJob(state, "job-1", spec, 1, &changes);
  EXPECT_TRUE(opened->store->Save(state, changes).ok());
  // Someone deletes the leader key: the store's next write is refused.
  etcdserverpb::DeleteRangeRequest gone;
  gone.set_key("/herd/test/leader");
  etcdserverpb::TxnRequest txn;
  *txn.add_success()->mutable_request_delete_range() = gone;
  ASSERT_TRUE((*client)->Txn(txn).ok());
  EXPECT_EQ(opened->store->Save(state, changes).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace herd::coordinator
