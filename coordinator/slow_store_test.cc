// A store write that does not return (etcd's round trip, an fsync) holds no
// reader: heartbeats, listings, status and the rendezvous go on while a
// user's call (cancel, resize, priority, cordon, drain, a checkpoint record)
// is written, and the call answers only once its write is durable. Writes
// reach the store in the order of their changes, and a failed write is
// answered, shown and retried as before. Real SQLite behind a gate.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <sqlite3.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/coordinator.h"
#include "coordinator/sqlite_state_store.h"
#include "coordinator/testing/gated_store.h"
#include "coordinator/testing/metric_value.h"
#include "coordinator/testing/recording_watcher.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Bounds the waits that must end on their own: past it the test fails
// rather than hangs.
constexpr absl::Duration kMustFinishWithin = absl::Seconds(30);

class SlowStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_path_ =
        ::testing::TempDir() + "/slow-store-" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db_path_ + suffix).c_str());
    auto store = SqliteStateStore::Open(db_path_);
    ASSERT_TRUE(store.ok()) << store.status();
    CoordinatorOptions options;
    options.run_ticker = false;
    auto coordinator =
        Coordinator::Create(options, std::make_unique<GatedStore>(*std::move(store), &gate_), &clock_, &metrics_);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    // w1 and w2 run a job; w3 is idle. All three have been heard.
    for (const char* id : {"w1", "w2", "w3"}) Register(id);
    v1::JobSpec spec;
    spec.mutable_model()->set_name("mlp");
    spec.mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
    spec.set_batch_size(8);
    spec.set_min_workers(1);
    spec.set_max_workers(2);
    spec.mutable_checkpoint()->set_keep(2);
    auto job = coordinator_->SubmitJob(spec);
    ASSERT_TRUE(job.ok()) << job.status();
    job_id_ = job->id();
    coordinator_->Tick();
    ASSERT_EQ(coordinator_->GetJob(job_id_)->state(), v1::RUNNING);
    for (const char* id : {"w1", "w2"}) Heartbeat(id, {job_id_});
    Heartbeat("w3", {});
  }

  void TearDown() override {
    gate_.Open();  // a failed test may have left it closed; shutdown writes
    coordinator_.reset();
  }

  void Register(const std::string& id) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_address(id + ".example:29500");
    request.set_device_kind("cpu");
    request.set_device_count(1);
    ASSERT_TRUE(coordinator_->RegisterWorker(request).ok());
  }

  v1::HeartbeatResponse Heartbeat(const std::string& id, const std::vector<std::string>& running_jobs) {
    v1::HeartbeatRequest request;
    request.set_worker_id(id);
    for (const std::string& job : running_jobs) request.add_running_jobs(job);
    auto response = coordinator_->Heartbeat(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : v1::HeartbeatResponse();
  }

  v1::CommitCheckpointRequest Checkpoint(int64_t step) {
    v1::CommitCheckpointRequest request;
    request.set_job_id(job_id_);
    request.set_generation(1);
    request.set_step(step);
    request.set_path(job_id_ + "/step-" + std::to_string(step));
    request.set_size_bytes(100);
    request.set_sha256("feed");
    return request;
  }

  // What a restart would find: the database read by a second connection.
  ClusterState Stored() {
    auto store = SqliteStateStore::Open(db_path_);
    EXPECT_TRUE(store.ok()) << store.status();
    auto state = (*store)->Load(clock_.Now());
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *state : ClusterState();
  }

  // Runs `sql` on a second connection to the coordinator's database.
  void Sql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_path_.c_str(), &db), SQLITE_OK);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
  }

  // Every read the control plane serves while a write is in the store: an
  // alive-only heartbeat (of w3, which no call here touches), the job's
  // status and watch, the listings, and a rank's rendezvous.
  void ReadEverything() {
    EXPECT_FALSE(Heartbeat("w3", {}).reregister());
    EXPECT_TRUE(coordinator_->GetJob(job_id_).ok());
    auto watcher = std::make_shared<RecordingWatcher>();
    auto watch = coordinator_->WatchJob(job_id_, watcher);
    EXPECT_TRUE(watch.ok()) << watch.status();
    EXPECT_TRUE(watcher->Await([](const JobSnapshot&) { return true; }, kMustFinishWithin).has_value());
    if (watch.ok()) coordinator_->StopWatching(*watch);
    EXPECT_FALSE(coordinator_->ListJobs().empty());
    EXPECT_EQ(coordinator_->ListWorkers().size(), 3u);
    EXPECT_TRUE(coordinator_->ListCheckpoints(job_id_).ok());
    v1::JoinGenerationRequest join;
    join.set_job_id(job_id_);
    join.set_worker_id("w1");
    auto joined = coordinator_->JoinGeneration(join, nullptr);
    EXPECT_TRUE(joined.ok()) << joined.status();
  }

  // Holds `call`'s write in the store: every read goes on meanwhile, the
  // call is not answered and the store does not hold its change yet
  // (`stored` says whether it does); once the write returns, the call
  // answers OK and the change is stored.
  void ExpectAnsweredOnceWrittenHoldingNoReader(const std::function<absl::Status()>& call,
                                                const std::function<bool(const ClusterState&)>& stored) {
    ASSERT_FALSE(stored(Stored()));
    gate_.Close();
    absl::Status answer;
    absl::Notification answered;
    std::thread caller([&] {
      answer = call();
      answered.Notify();
    });
    const bool held = gate_.AwaitHeld();
    EXPECT_TRUE(held) << "the call wrote nothing";
    absl::Notification read;
    std::thread reader([&] {
      ReadEverything();
      read.Notify();
    });
    EXPECT_TRUE(read.WaitForNotificationWithTimeout(kMustFinishWithin))
        << "reads waited for a store write: it was made under the state lock";
    EXPECT_FALSE(answered.HasBeenNotified()) << "answered before its write was durable: " << answer;
    EXPECT_FALSE(stored(Stored()));
    gate_.Open();
    caller.join();
    reader.join();
    EXPECT_TRUE(answer.ok()) << answer;
    EXPECT_TRUE(stored(Stored()));
  }

  std::string db_path_;
  Gate gate_;
  FakeClock clock_;
  prometheus::Registry registry_;
  Metrics metrics_{registry_};
  std::unique_ptr<Coordinator> coordinator_;
  std::string job_id_;
};

TEST_F(SlowStoreTest, ACancelIsAnsweredOnceDurableAndHoldsNoReaderMeanwhile) {
  ExpectAnsweredOnceWrittenHoldingNoReader(
      [&] { return coordinator_->CancelJob(job_id_).status(); },
      [&](const ClusterState& stored) { return stored.jobs.at(job_id_).info.state() == v1::CANCELLED; });
}

TEST_F(SlowStoreTest, AResizeIsAnsweredOnceDurableAndHoldsNoReaderMeanwhile) {
  ExpectAnsweredOnceWrittenHoldingNoReader(
      [&] { return coordinator_->ResizeJob(job_id_, 0, 1).status(); },
      [&](const ClusterState& stored) { return stored.jobs.at(job_id_).info.spec().max_workers() == 1; });
}

TEST_F(SlowStoreTest, APriorityIsAnsweredOnceDurableAndHoldsNoReaderMeanwhile) {
  ExpectAnsweredOnceWrittenHoldingNoReader(
      [&] { return coordinator_->SetJobPriority(job_id_, 7).status(); },
      [&](const ClusterState& stored) { return stored.jobs.at(job_id_).info.spec().priority() == 7; });
}

TEST_F(SlowStoreTest, ACordonIsAnsweredOnceDurableAndHoldsNoReaderMeanwhile) {
  ExpectAnsweredOnceWrittenHoldingNoReader([&] { return coordinator_->CordonWorker("w1", true).status(); },
                                           [](const ClusterState& stored) { return stored.workers.at("w1").cordoned; });
}

TEST_F(SlowStoreTest, ADrainIsAnsweredOnceDurableAndHoldsNoReaderMeanwhile) {
  ExpectAnsweredOnceWrittenHoldingNoReader([&] { return coordinator_->DrainWorker("w2").status(); },
                                           [&](const ClusterState& stored) {
                                             return stored.workers.at("w2").cordoned &&
                                                    stored.jobs.at(job_id_).release_requested.count("w2") > 0;
                                           });
}

TEST_F(SlowStoreTest, ACheckpointRecordIsAnsweredOnceDurableAndHoldsNoReaderMeanwhile) {
  ExpectAnsweredOnceWrittenHoldingNoReader(
      [&] { return coordinator_->CommitCheckpoint(Checkpoint(10)).status(); },
      [&](const ClusterState& stored) { return stored.checkpoints.count(job_id_) > 0; });
  // Listed once written, not while it was being written (ReadEverything
  // saw the catalog meanwhile): the catalog lists what a restart would.
  auto listed = coordinator_->ListCheckpoints(job_id_);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().step(), 10);
  // Joiners from now on resume from it.
  v1::JoinGenerationRequest join;
  join.set_job_id(job_id_);
  join.set_worker_id("w2");
  auto joined = coordinator_->JoinGeneration(join, nullptr);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->checkpoint_path(), job_id_ + "/step-10");
}

// A change made while an earlier one is in the store is written after it,
// and its call answers after that.
TEST_F(SlowStoreTest, ALaterChangeReachesTheStoreAfterTheEarlierOne) {
  auto watcher = std::make_shared<RecordingWatcher>();
  auto watch = coordinator_->WatchJob(job_id_, watcher);
  ASSERT_TRUE(watch.ok()) << watch.status();
  gate_.Close();
  std::thread cordon([&] { EXPECT_TRUE(coordinator_->CordonWorker("w1", true).ok()); });
  ASSERT_TRUE(gate_.AwaitHeld());
  absl::Notification cancelled;
  std::thread cancel([&] {
    EXPECT_TRUE(coordinator_->CancelJob(job_id_).ok());
    cancelled.Notify();
  });
  // The cancel holds in memory at once (the state lock is free) ...
  EXPECT_TRUE(watcher->Await([](const JobSnapshot& job) { return job.info.state() == v1::CANCELLED; },
                             kMustFinishWithin)
                  .has_value());
  // ... but is neither stored nor answered before the cordon is written.
  EXPECT_EQ(Stored().jobs.at(job_id_).info.state(), v1::RUNNING);
  EXPECT_FALSE(cancelled.HasBeenNotified());
  gate_.Open();
  cordon.join();
  cancel.join();
  coordinator_->StopWatching(*watch);
  const std::vector<std::string> log = gate_.Log();
  ASSERT_GE(log.size(), 4u);
  EXPECT_THAT(std::vector<std::string>(log.end() - 4, log.end()),
              ElementsAre("enter w1", "leave w1", HasSubstr("enter " + job_id_), HasSubstr("leave " + job_id_)));
  EXPECT_EQ(Stored().jobs.at(job_id_).info.state(), v1::CANCELLED);
}

// A record delivered again while the first is in the store waits for it,
// then finds it listed: one entry, one answer.
TEST_F(SlowStoreTest, ACheckpointDeliveredAgainWhileBeingWrittenIsListedOnce) {
  gate_.Close();
  absl::StatusOr<v1::CommitCheckpointResponse> first, again;
  std::thread sender([&] { first = coordinator_->CommitCheckpoint(Checkpoint(10)); });
  ASSERT_TRUE(gate_.AwaitHeld());
  std::thread resender([&] { again = coordinator_->CommitCheckpoint(Checkpoint(10)); });
  gate_.Open();
  sender.join();
  resender.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->checkpoint().id(), first->checkpoint().id());
  EXPECT_EQ(coordinator_->ListCheckpoints(job_id_)->size(), 1u);
  EXPECT_EQ(Stored().checkpoints.at(job_id_).size(), 1u);
}

// As before the writes left the lock: a user's call whose write fails is
// refused naming the store's error; the change holds in memory, the job
// shows a storage warning, and the ticker writes it once storage recovers.
TEST_F(SlowStoreTest, ACancelWhoseWriteFailsIsRefusedShownAndWrittenOnceStorageRecovers) {
  Sql("CREATE TRIGGER refuse BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'injected: disk full'); END;");
  auto cancelled = coordinator_->CancelJob(job_id_);
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(cancelled.status().message(), HasSubstr("state change not persisted: "));
  EXPECT_THAT(cancelled.status().message(), HasSubstr("injected: disk full"));
  EXPECT_EQ(coordinator_->GetJob(job_id_)->state(), v1::CANCELLED);
  EXPECT_THAT(coordinator_->GetJob(job_id_)->storage_warning(), HasSubstr("injected: disk full"));
  EXPECT_EQ(Stored().jobs.at(job_id_).info.state(), v1::RUNNING);
  Sql("DROP TRIGGER refuse;");
  clock_.Advance(1);
  coordinator_->Tick();
  EXPECT_EQ(Stored().jobs.at(job_id_).info.state(), v1::CANCELLED);
  EXPECT_EQ(coordinator_->GetJob(job_id_)->storage_warning(), "");
}

// A checkpoint record that cannot be written is refused, not listed and
// counted; the trainer's next try records it.
TEST_F(SlowStoreTest, ACheckpointRecordThatFailsIsRefusedAndNotListed) {
  Sql("CREATE TRIGGER refuse BEFORE INSERT ON checkpoints BEGIN SELECT RAISE(ABORT, 'injected: disk full'); END;");
  auto refused = coordinator_->CommitCheckpoint(Checkpoint(10));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(refused.status().message(), HasSubstr("checkpoint not recorded: "));
  EXPECT_THAT(refused.status().message(), HasSubstr("injected: disk full"));
  EXPECT_TRUE(coordinator_->ListCheckpoints(job_id_)->empty());
  EXPECT_THAT(coordinator_->GetJob(job_id_)->storage_warning(), HasSubstr("injected: disk full"));
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_state_write_failures_total", {{"record", "checkpoint"}}), 1);
  Sql("DROP TRIGGER refuse;");
  auto recorded = coordinator_->CommitCheckpoint(Checkpoint(10));
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(coordinator_->ListCheckpoints(job_id_)->size(), 1u);
  EXPECT_EQ(Stored().checkpoints.at(job_id_).size(), 1u);
}

}  // namespace
}  // namespace herd::coordinator
