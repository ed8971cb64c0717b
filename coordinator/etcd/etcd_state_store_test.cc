// What only the etcd store has: a Save too large for one transaction is
// staged and committed, so a coordinator lost midway leaves all of it or
// nothing (tests with a real etcd member).
#include "coordinator/etcd/etcd_state_store.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "coordinator/etcd/local_etcd.h"
#include "coordinator/testing/big_job.h"
#include "coordinator/generations.h"

namespace herd::coordinator {
namespace {

constexpr int kWorkers = 300;  // 301 records: more than one transaction holds
constexpr char kPrefix[] = "/staged/";

class StagedSaveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!LocalEtcd::Installed()) {
      GTEST_SKIP() << kEtcdBinary << " is missing: install Debian's etcd-server (scripts/setup.sh does)";
    }
    auto etcd = LocalEtcd::Start(1);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    auto client = EtcdClient::Connect(etcd_->endpoints());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    // The change under test: the workers register and the job starts on
    // every one of them, in one Save (as records retried after an outage
    // are). A rendezvous alone is one record, the job's.
    scheduled_ = testing::RegisterWorkersAndBigJob(state_, kWorkers, 1000);
    scheduled_.Merge(Schedule(state_, 601));
    ASSERT_EQ(state_.jobs.at("job-big").info.state(), v1::RUNNING);
    ASSERT_EQ(scheduled_.workers.size(), static_cast<size_t>(kWorkers));
  }

  // Small transactions: the schedule is staged in several chunks.
  std::unique_ptr<EtcdStateStore> Store() {
    TxnLimits limits;
    limits.max_bytes = 16 << 10;
    return std::make_unique<EtcdStateStore>(client_, kPrefix, limits);
  }

  // A store fenced as the leader (a leader key of its own).
  std::unique_ptr<EtcdStateStore> LeaderStore() {
    etcdserverpb::PutRequest put;
    put.set_key(std::string(kPrefix) + "leader");
    auto created = client_->Put(put);
    EXPECT_TRUE(created.ok()) << created.status();
    auto store = Store();
    store->FenceWith({put.key(), created->header().revision()});
    return store;
  }

  int64_t KeysUnder(const std::string& prefix) {
    etcdserverpb::RangeRequest range;
    range.set_key(prefix);
    range.set_range_end(PrefixRangeEnd(prefix));
    range.set_count_only(true);
    auto response = client_->Range(range);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->count() : -1;
  }

  // Saves the schedule as a coordinator lost right after its commit would:
  // stopped after 1, 2, ... transactions until a commit is stored (each
  // try stages afresh; the uncommitted batches are ignored). Returns the
  // transactions the staging took.
  int StageAndCommitOnly() {
    for (int txns = 1; txns < 100; ++txns) {
      auto store = Store();
      store->StopAfterTxnsForTest(txns);
      absl::Status saved = store->Save(state_, scheduled_);
      EXPECT_FALSE(saved.ok()) << "the save should have been stopped";
      etcdserverpb::RangeRequest range;
      range.set_key(std::string(kPrefix) + "split/");
      range.set_range_end(PrefixRangeEnd(range.key()));
      range.set_keys_only(true);
      auto found = client_->Range(range);
      EXPECT_TRUE(found.ok()) << found.status();
      if (!found.ok()) return -1;
      for (const auto& kv : found->kvs()) {
        if (absl::EndsWith(kv.key(), "/commit")) return txns;
      }
    }
    ADD_FAILURE() << "no commit after 100 transactions";
    return -1;
  }

  int BusyWorkers(const ClusterState& state) {
    int busy = 0;
    for (const auto& [id, worker] : state.workers) busy += worker.state == v1::BUSY ? 1 : 0;
    return busy;
  }

  std::unique_ptr<LocalEtcd> etcd_;
  std::shared_ptr<EtcdClient> client_;
  ClusterState state_;
  ChangeSet scheduled_;
};

TEST_F(StagedSaveTest, LostBeforeItsCommitNothingOfItIsVisible) {
  auto store = Store();
  store->StopAfterTxnsForTest(1);  // the first chunk only
  EXPECT_FALSE(store->Save(state_, scheduled_).ok());
  EXPECT_GT(KeysUnder(std::string(kPrefix) + "split/"), 0);

  auto loaded = LeaderStore()->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->jobs.count("job-big"), 0u);
  EXPECT_TRUE(loaded->workers.empty());
  EXPECT_EQ(KeysUnder(std::string(kPrefix) + "split/"), 0);  // the leader cleared it
}

TEST_F(StagedSaveTest, LostAfterItsCommitAllOfItIsLoadedAndTheLeaderWritesIt) {
  EXPECT_GT(StageAndCommitOnly(), 1) << "the schedule should need several chunks";
  // No record itself was written yet.
  auto before = client_->Range([] {
    etcdserverpb::RangeRequest job;
    job.set_key(std::string(kPrefix) + "jobs/job-big");
    return job;
  }());
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->kvs_size(), 0);

  // Any reader sees the whole schedule.
  auto read = Store()->Load(900);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->jobs.at("job-big").info.state(), v1::RUNNING);
  EXPECT_EQ(BusyWorkers(*read), kWorkers);
  EXPECT_GT(KeysUnder(std::string(kPrefix) + "split/"), 0);  // a follower only reads

  // The leader's Load writes the records and clears the batch.
  auto loaded = LeaderStore()->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(BusyWorkers(*loaded), kWorkers);
  EXPECT_EQ(KeysUnder(std::string(kPrefix) + "split/"), 0);
  auto after = client_->Range([] {
    etcdserverpb::RangeRequest job;
    job.set_key(std::string(kPrefix) + "jobs/job-big");
    return job;
  }());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->kvs_size(), 1);
  auto plain = Store()->Load(900);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(BusyWorkers(*plain), kWorkers);
  EXPECT_EQ(plain->jobs.at("job-big").info.state(), v1::RUNNING);
}

TEST_F(StagedSaveTest, ARecordWrittenAfterAnUnfinishedBatchKeepsItsLaterValue) {
  StageAndCommitOnly();
  // Later, one worker is cordoned: a one-record Save, written at once.
  const std::string cordoned = "worker-1007";
  state_.workers.at(cordoned).cordoned = true;
  ChangeSet one;
  one.workers.insert(cordoned);
  ASSERT_TRUE(Store()->Save(state_, one).ok());

  auto loaded = LeaderStore()->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->workers.at(cordoned).cordoned);
  EXPECT_FALSE(loaded->workers.at("worker-1008").cordoned);
  EXPECT_EQ(BusyWorkers(*loaded), kWorkers);
  auto again = Store()->Load(900);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->workers.at(cordoned).cordoned);
}

// What waits for a change (a rendezvous's ranks) is told once the staged
// write committed, before its records are put one transaction at a time.
TEST_F(StagedSaveTest, CommittedIsCalledOnceTheCommitIsStoredBeforeTheRecordsArePut) {
  int calls = 0;
  int job_records_then = -1;
  int busy_then = 0;
  auto store = Store();
  absl::Status saved = store->Write(Snapshot(state_, scheduled_), [&] {
    ++calls;
    etcdserverpb::RangeRequest job;
    job.set_key(std::string(kPrefix) + "jobs/job-big");
    auto found = client_->Range(job);
    ASSERT_TRUE(found.ok()) << found.status();
    job_records_then = found->kvs_size();
    auto read = Store()->Load(900);  // a reader sees the whole schedule already
    ASSERT_TRUE(read.ok()) << read.status();
    busy_then = BusyWorkers(*read);
  });
  ASSERT_TRUE(saved.ok()) << saved;
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(busy_then, kWorkers);
  EXPECT_EQ(job_records_then, 0) << "the record was put before the commit was announced";
  etcdserverpb::RangeRequest job;
  job.set_key(std::string(kPrefix) + "jobs/job-big");
  auto after = client_->Range(job);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->kvs_size(), 1);
}

TEST_F(StagedSaveTest, AFinishedSplitSaveLeavesNoStagedKeys) {
  ASSERT_TRUE(Store()->Save(state_, scheduled_).ok());
  EXPECT_EQ(KeysUnder(std::string(kPrefix) + "split/"), 0);
  auto loaded = Store()->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(BusyWorkers(*loaded), kWorkers);
}

}  // namespace
}  // namespace herd::coordinator
