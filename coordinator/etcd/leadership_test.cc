#include "coordinator/etcd/leadership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "coordinator/etcd/etcd_state_store.h"
#include "coordinator/etcd/local_etcd.h"

namespace herd::coordinator {
namespace {

using ::testing::HasSubstr;

// What either coordinator would wait for: generous, and only reached when
// the feature is broken.
constexpr absl::Duration kEventTimeout = absl::Seconds(30);

class LeadershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!LocalEtcd::Installed()) {
      GTEST_SKIP() << kEtcdBinary << " is missing: install Debian's etcd-server (scripts/setup.sh does)";
    }
  }

  void StartEtcd(int members) {
    auto started = LocalEtcd::Start(members);
    ASSERT_TRUE(started.ok()) << started.status();
    etcd_ = *std::move(started);
  }

  std::shared_ptr<EtcdClient> Client(std::vector<std::string> endpoints = {}) {
    auto client = EtcdClient::Connect(endpoints.empty() ? etcd_->endpoints() : endpoints);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::shared_ptr<EtcdClient>(*std::move(client));
  }

  LeadershipOptions Options(const std::string& identity, absl::Notification* lost, int64_t lease_seconds = 5) {
    LeadershipOptions options;
    options.key = std::string(kPrefix) + "leader";
    options.identity = identity;
    options.lease_seconds = lease_seconds;
    options.on_lost = [lost] { lost->Notify(); };
    return options;
  }

  // A state of one running job at `step`, and the change that names it.
  static ClusterState JobAtStep(int64_t step, ChangeSet* changes) {
    ClusterState state;
    v1::JobSpec spec;
    spec.set_name("mnist");
    spec.mutable_model()->set_name("mlp");
    spec.set_batch_size(8);
    JobRecord& job = AddPendingJob(state, "job-1", spec, 100, changes);
    job.info.set_state(v1::RUNNING);
    job.info.set_step(step);
    return state;
  }

  static int64_t StoredStep(StateStore& store) {
    auto loaded = store.Load(200);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->jobs.at("job-1").info.step() : -1;
  }

  static constexpr char kPrefix[] = "/herd-test/";
  std::unique_ptr<LocalEtcd> etcd_;
};

// The leader's lease is revoked (as it expires when the leader is lost): the
// standby leads with a newer token, the former leader's writes are refused
// and nothing of them is stored, and the new leader loads what the former
// one committed.
TEST_F(LeadershipTest, ARevokedLeaderIsFencedAndTheStandbyTakesOver) {
  StartEtcd(1);
  auto client_a = Client();
  auto client_b = Client();
  absl::Notification a_lost, b_lost;
  auto a = EtcdLeadership::Campaign(client_a, Options("coordinator-a", &a_lost));
  ASSERT_TRUE(a.ok()) << a.status();
  EtcdStateStore store_a(client_a, kPrefix);
  int a_refusals = 0;
  store_a.FenceWith((*a)->fence(), [&] { ++a_refusals; });
  ChangeSet changes;
  ASSERT_TRUE(store_a.Save(JobAtStep(10, &changes), changes).ok());

  std::unique_ptr<EtcdLeadership> b;
  absl::Notification b_leads;
  std::thread standby([&] {
    auto campaigned = EtcdLeadership::Campaign(client_b, Options("coordinator-b", &b_lost));
    EXPECT_TRUE(campaigned.ok()) << campaigned.status();
    if (campaigned.ok()) b = *std::move(campaigned);
    b_leads.Notify();
  });
  EXPECT_EQ(*EtcdLeadership::CurrentLeader(*client_a, Options("", &a_lost).key), "coordinator-a");
  EXPECT_FALSE(b_leads.HasBeenNotified());
  EXPECT_EQ(a_refusals, 0);

  ASSERT_TRUE(client_a->LeaseRevoke((*a)->lease_id()).ok());
  ASSERT_TRUE(b_leads.WaitForNotificationWithTimeout(kEventTimeout));
  standby.join();
  ASSERT_NE(b, nullptr);
  EXPECT_GT(b->token(), (*a)->token());
  EXPECT_EQ(*EtcdLeadership::CurrentLeader(*client_a, Options("", &a_lost).key), "coordinator-b");

  // The former leader's writes: refused whole.
  ChangeSet later;
  absl::Status refused = store_a.Save(JobAtStep(20, &later), later);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("not the leader"));
  v1::CheckpointInfo checkpoint;
  checkpoint.set_id("ckpt-20-aaaaaa");
  checkpoint.set_job_id("job-1");
  EXPECT_EQ(store_a.SaveCheckpoint(checkpoint, {}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a_refusals, 2);  // each refusal tells the store's owner to step down
  // It learns it from its keep-alive too, and steps down.
  EXPECT_TRUE(a_lost.WaitForNotificationWithTimeout(kEventTimeout));

  // The new leader rebuilds from etcd: the former leader's last committed
  // write, nothing after it; and its own writes go through.
  EtcdStateStore store_b(client_b, kPrefix);
  store_b.FenceWith(b->fence());
  auto loaded = store_b.Load(200);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->jobs.at("job-1").info.step(), 10);
  EXPECT_TRUE(loaded->checkpoints.empty());
  ChangeSet next;
  ASSERT_TRUE(store_b.Save(JobAtStep(30, &next), next).ok());
  EXPECT_EQ(StoredStep(store_b), 30);
  EXPECT_FALSE(b_lost.HasBeenNotified());
}

// A leader that stops renewing (a frozen process) loses the key when its
// lease expires; the standby then leads, and the frozen one's write, once
// it wakes, is refused.
TEST_F(LeadershipTest, AFrozenLeadersLeaseExpiresAndItsNextWriteIsRefused) {
  StartEtcd(1);
  auto client_a = Client();
  auto client_b = Client();
  absl::Notification a_lost, b_lost;
  auto a = EtcdLeadership::Campaign(client_a, Options("coordinator-a", &a_lost, /*lease_seconds=*/2));
  ASSERT_TRUE(a.ok()) << a.status();
  EtcdStateStore store_a(client_a, kPrefix);
  store_a.FenceWith((*a)->fence());
  ChangeSet changes;
  ASSERT_TRUE(store_a.Save(JobAtStep(10, &changes), changes).ok());

  (*a)->StopRenewingForTest();
  const absl::Time stop_at = absl::Now() + kEventTimeout;
  auto b =
      EtcdLeadership::Campaign(client_b, Options("coordinator-b", &b_lost, 2), [&] { return absl::Now() > stop_at; });
  ASSERT_TRUE(b.ok()) << b.status();

  ChangeSet later;
  EXPECT_EQ(store_a.Save(JobAtStep(20, &later), later).code(), absl::StatusCode::kFailedPrecondition);
  EtcdStateStore store_b(client_b, kPrefix);
  EXPECT_EQ(StoredStep(store_b), 10);
}

// A campaign gives up when asked to while another coordinator leads.
TEST_F(LeadershipTest, ACampaignStopsWhenAsked) {
  StartEtcd(1);
  absl::Notification a_lost, b_lost;
  auto a = EtcdLeadership::Campaign(Client(), Options("coordinator-a", &a_lost));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = EtcdLeadership::Campaign(Client(), Options("coordinator-b", &b_lost), [] { return true; });
  EXPECT_EQ(b.status().code(), absl::StatusCode::kCancelled);
}

// A standby learns who leads (the leader key's value) while it waits, and
// that nobody can be named when etcd does not answer.
TEST_F(LeadershipTest, AStandbyLearnsWhoLeads) {
  StartEtcd(1);
  absl::Notification a_lost, b_lost;
  auto a = EtcdLeadership::Campaign(Client(), Options("127.0.0.1:7070", &a_lost));
  ASSERT_TRUE(a.ok()) << a.status();
  LeadershipOptions b_options = Options("127.0.0.1:7071", &b_lost);
  absl::Mutex mu;
  std::vector<std::pair<std::string, std::string>> followed;
  b_options.on_follow = [&](const std::string& leader, const std::string& why) {
    absl::MutexLock lock(&mu);
    followed.emplace_back(leader, why);
  };
  auto heard = [&] {
    absl::MutexLock lock(&mu);
    return !followed.empty();
  };
  auto b = EtcdLeadership::Campaign(Client(), b_options, heard);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kCancelled);
  {
    absl::MutexLock lock(&mu);
    ASSERT_FALSE(followed.empty());
    EXPECT_EQ(followed.front().first, "127.0.0.1:7070");
  }

  etcd_->Kill(0);
  followed.clear();
  auto c = EtcdLeadership::Campaign(Client(), b_options, heard);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kCancelled);
  absl::MutexLock lock(&mu);
  ASSERT_FALSE(followed.empty());
  EXPECT_EQ(followed.front().first, "");
  EXPECT_THAT(followed.front().second, HasSubstr("etcd does not answer"));
}

// Three etcd members; the member the leader's client uses is killed: its
// writes and lease renewals move to the others, and it keeps leading.
TEST_F(LeadershipTest, ThreeMembersLosingTheOneInUseCostNoLeadership) {
  StartEtcd(3);
  auto client = Client();
  absl::Notification lost;
  auto leader = EtcdLeadership::Campaign(client, Options("coordinator-a", &lost));
  ASSERT_TRUE(leader.ok()) << leader.status();
  EtcdStateStore store(client, kPrefix);
  store.FenceWith((*leader)->fence());
  ChangeSet changes;
  ASSERT_TRUE(store.Save(JobAtStep(10, &changes), changes).ok());

  etcd_->Kill(0);  // the first endpoint: the one the client has used so far
  ChangeSet later;
  absl::Status saved = store.Save(JobAtStep(20, &later), later);
  ASSERT_TRUE(saved.ok()) << saved;
  EtcdStateStore survivors(Client({etcd_->endpoints()[1], etcd_->endpoints()[2]}), kPrefix);
  EXPECT_EQ(StoredStep(survivors), 20);
  EXPECT_FALSE(lost.HasBeenNotified());
  EXPECT_FALSE((*leader)->lost());
}

}  // namespace
}  // namespace herd::coordinator
