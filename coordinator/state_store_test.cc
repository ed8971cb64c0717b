#include "coordinator/state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "coordinator/generations.h"
#include "coordinator/sqlite_state_store.h"
#include "coordinator/test_stores.h"
#include "coordinator/testing/big_job.h"
#include "google/protobuf/util/message_differencer.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;

std::string FreshDatabasePath(const std::string& name) {
  std::string path = ::testing::TempDir() + "/" + name + ".db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  return path;
}

v1::CheckpointInfo Checkpoint(const std::string& id, int64_t step) {
  v1::CheckpointInfo checkpoint;
  checkpoint.set_id(id);
  checkpoint.set_job_id("job-running");
  checkpoint.set_step(step);
  checkpoint.set_epoch(1);
  checkpoint.set_generation(1);
  checkpoint.set_path("job-running/step-" + std::to_string(step));
  checkpoint.set_size_bytes(1234);
  checkpoint.set_sha256("ab12");
  checkpoint.set_created_unix(900.5);
  checkpoint.set_samples_in_epoch(step * 64);
  return checkpoint;
}

// A state with one pending job, one running job (one member finished, progress
// and eval reported), two workers and a checkpoint catalog.
ClusterState SampleState(ChangeSet* changes) {
  ClusterState state;
  for (const char* id : {"w1", "w2"}) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_address(std::string(id) + ":29500");
    request.set_device_kind("cuda");
    request.set_device_count(8);
    changes->Merge(UpsertWorker(state, request, 500));
  }
  v1::JobSpec spec;
  spec.set_name("mnist");
  spec.mutable_model()->set_name("mnist_cnn");
  spec.set_batch_size(64);
  spec.set_min_workers(2);
  spec.set_max_workers(2);
  spec.set_device(v1::DEVICE_CUDA);
  JobRecord& running = AddPendingJob(state, "job-running", spec, 600, changes);
  changes->Merge(Schedule(state, 601));
  running.generation.finished.insert("w2");
  running.info.set_step(42);
  running.info.set_epoch(1);
  running.info.set_samples_in_epoch(2688);
  running.info.set_samples_per_second(1500.25);
  running.info.set_loss(0.5);
  running.info.set_total_steps(900);
  (*running.info.mutable_eval())["accuracy"] = 0.875;
  running.info.set_learning_rate(0.0125);
  running.info.set_warning("checkpoint at step 40 failed: No space left on device");
  // As a job that succeeded records its final model (herd fetch checks it).
  for (const char* name : {"model-final.safetensors", "model-final.pt"}) {
    v1::ModelFile* file = running.info.add_final_model();
    file->set_name(name);
    file->set_size_bytes(int64_t{5} << 32);  // past 32 bits
    file->set_sha256(std::string(64, name[12] == 's' ? 'a' : 'b'));
  }
  // Fault-tolerance state as after a failure that healed from rank 0.
  running.generation.reason = GenerationStartReason::kFailureReported;
  running.generation.started_at = 650.5;
  running.generation.start_step = 40;
  running.generation.committed = true;
  running.restarts_used = 2;
  running.last_failure = "worker w3 (rank 2) lost: lease expired";
  // Being drained: asked to leave the job at its next step boundary.
  running.release_requested["w1"] = ReleaseReason::kDrain;
  // A member let go by a loss still finishes the generation it served.
  running.served = {{"w1", 3}, {"w3", 2}};
  // A hung member left out behind a cut link, on its second back-off, and
  // one back after its back-off, not yet in a commit.
  v1::UnresponsiveMember& hung = running.unresponsive["w4"];
  hung.set_worker_id("w4");
  hung.set_rank(3);
  hung.set_generation(4);
  hung.set_step(57);
  hung.set_since(1234.5);
  hung.set_backoff_seconds(20);
  hung.set_answered(true);
  hung.set_unreachable_from("site=us-east");
  *running.info.add_unresponsive() = hung;
  running.readmit["w4"] = ReadmitRecord{1, 0};
  running.readmit["w5"] = ReadmitRecord{0, 4};
  state.workers.at("w1").cordoned = true;
  state.workers.at("w1").labels = {{"site", "us-east"}, {"pool", "a100"}};
  spec.set_name("later");
  // Waiting for workers lower-priority jobs release to it: typed, so it
  // must come back typed.
  AddPendingJob(state, "job-pending", spec, 700, changes).pending_reason = PendingReason::kWaitingForReleasedWorkers;
  return state;
}


// The same tests on every store: SQLite, and a real etcd.
class StoreTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    if (std::string why = StoreUnavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    place_ = std::make_unique<TestStorePlace>(GetParam(), name.substr(0, name.find('/')));
  }

  // A store on the same place as every other one this test opens: a second
  // one is what a restarted coordinator sees.
  std::unique_ptr<StateStore> Open() { return place_->Open(); }

  std::unique_ptr<TestStorePlace> place_;
};

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values(StoreKind::kSqlite, StoreKind::kEtcd),
                         StoreKindName);

TEST_P(StoreTest, ReopenedStoreLoadsEverythingBack) {
  ChangeSet changes;
  ClusterState saved = SampleState(&changes);
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Save(saved, changes).ok());
    ASSERT_TRUE(store->SaveCheckpoint(Checkpoint("ckpt-10-aaaaaa", 10), {}).ok());
    ASSERT_TRUE(store->SaveCheckpoint(Checkpoint("ckpt-20-bbbbbb", 20), {}).ok());
    ASSERT_TRUE(store->SaveCheckpoint(Checkpoint("ckpt-30-cccccc", 30), {Checkpoint("ckpt-10-aaaaaa", 10)}).ok());
  }

  auto reopened = Open();
  ASSERT_NE(reopened, nullptr);
  auto loaded = reopened->Load(/*now=*/2000);
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  ASSERT_EQ(loaded->jobs.size(), 2u);
  for (const auto& [id, job] : saved.jobs) {
    const JobRecord& back = loaded->jobs.at(id);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(back.info, job.info))
        << "saved:\n"
        << job.info.DebugString() << "loaded:\n"
        << back.info.DebugString();
    EXPECT_EQ(back.submit_seq, job.submit_seq);
    EXPECT_EQ(back.generation.number, job.generation.number);
    EXPECT_EQ(back.generation.members, job.generation.members);
    EXPECT_EQ(back.generation.finished, job.generation.finished);
    EXPECT_EQ(back.next_generation, job.next_generation);
    EXPECT_EQ(back.generation.formed, job.generation.formed);
    EXPECT_EQ(back.generation.reason, job.generation.reason);
    EXPECT_DOUBLE_EQ(back.generation.started_at, job.generation.started_at);
    EXPECT_EQ(back.generation.start_step, job.generation.start_step);
    EXPECT_EQ(back.generation.committed, job.generation.committed);
    EXPECT_EQ(back.restarts_used, job.restarts_used);
    EXPECT_EQ(back.last_failure, job.last_failure);
    EXPECT_DOUBLE_EQ(back.waiting_since, job.waiting_since);
    EXPECT_EQ(back.release_requested, job.release_requested);
    EXPECT_EQ(back.pending_reason, job.pending_reason);
    EXPECT_EQ(back.served, job.served);
    ASSERT_EQ(back.unresponsive.size(), job.unresponsive.size());
    for (const auto& [id, member] : job.unresponsive) {
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(back.unresponsive.at(id), member)) << id;
    }
    ASSERT_EQ(back.readmit.size(), job.readmit.size());
    for (const auto& [id, record] : job.readmit) {
      EXPECT_EQ(back.readmit.at(id).strikes, record.strikes) << id;
      EXPECT_EQ(back.readmit.at(id).readmitted_in, record.readmitted_in) << id;
    }
  }
  EXPECT_EQ(loaded->jobs.at("job-running").unresponsive.size(), 1u);
  EXPECT_EQ(loaded->jobs.at("job-running").readmit.size(), 2u);
  EXPECT_EQ(ReleaseReasonName(loaded->jobs.at("job-running").release_requested.at("w1")), "drain");
  EXPECT_EQ(loaded->jobs.at("job-running").restarts_used, 2);
  EXPECT_EQ(loaded->jobs.at("job-running").info.state(), v1::RUNNING);
  EXPECT_THAT(loaded->jobs.at("job-running").generation.members, ElementsAre("w1", "w2"));
  EXPECT_EQ(loaded->next_submit_seq, saved.next_submit_seq);

  ASSERT_EQ(loaded->workers.size(), 2u);
  const WorkerRecord& w1 = loaded->workers.at("w1");
  EXPECT_EQ(w1.address, "w1:29500");
  EXPECT_EQ(w1.device_kind, "cuda");
  EXPECT_EQ(w1.device_count, 8);
  EXPECT_EQ(w1.state, v1::BUSY);
  EXPECT_EQ(w1.job_id, "job-running");
  EXPECT_DOUBLE_EQ(w1.last_heartbeat, 2000);  // a full lease to come back
  EXPECT_TRUE(w1.cordoned);
  EXPECT_FALSE(loaded->workers.at("w2").cordoned);
  EXPECT_EQ(w1.labels, (std::map<std::string, std::string>{{"pool", "a100"}, {"site", "us-east"}}));
  EXPECT_TRUE(loaded->workers.at("w2").labels.empty());

  const auto& catalog = loaded->checkpoints.at("job-running");
  ASSERT_EQ(catalog.size(), 2u);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(catalog[0], Checkpoint("ckpt-20-bbbbbb", 20)));
  EXPECT_EQ(catalog[1].id(), "ckpt-30-cccccc");
}

TEST_P(StoreTest, LaterSavesReplaceEarlierRows) {
  ChangeSet changes;
  ClusterState state = SampleState(&changes);
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Save(state, changes).ok());

  auto cancelled = CancelJob(state, "job-running", 800);
  ASSERT_TRUE(cancelled.ok());
  ASSERT_TRUE(store->Save(state, *cancelled).ok());

  auto loaded = Open()->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->jobs.at("job-running").info.state(), v1::CANCELLED);
  EXPECT_EQ(loaded->jobs.at("job-running").info.reason(), "cancelled by user");
  EXPECT_EQ(loaded->workers.at("w1").state, v1::IDLE);
  EXPECT_EQ(loaded->workers.at("w1").job_id, "");
}

TEST_P(StoreTest, WaitingGenerationSurvivesAReopen) {
  ChangeSet changes;
  ClusterState state = SampleState(&changes);
  JobRecord& job = state.jobs.at("job-running");
  job.generation.formed = false;
  job.generation.members = {"w1"};
  job.waiting_since = 777.25;
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Save(state, changes).ok());

  auto loaded = Open()->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const JobRecord& back = loaded->jobs.at("job-running");
  EXPECT_FALSE(back.generation.formed);
  EXPECT_THAT(back.generation.members, ElementsAre("w1"));
  EXPECT_DOUBLE_EQ(back.waiting_since, 777.25);
  EXPECT_TRUE(loaded->jobs.at("job-pending").generation.formed);
}

// A database written before generations carried fault-tolerance state gains
// the new columns on open, with defaults that fit its rows.
TEST(SqliteStateStore, OpensADatabaseFromBeforeTheFaultToleranceColumns) {
  const std::string path = FreshDatabasePath("old_schema");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* old_schema = R"sql(
CREATE TABLE jobs (id TEXT PRIMARY KEY, submit_seq INTEGER NOT NULL, spec BLOB NOT NULL, state INTEGER NOT NULL,
  reason TEXT NOT NULL, step INTEGER NOT NULL, epoch INTEGER NOT NULL, world_size INTEGER NOT NULL,
  samples_in_epoch INTEGER NOT NULL, samples_per_second REAL NOT NULL, loss REAL NOT NULL, eval TEXT NOT NULL,
  total_steps INTEGER NOT NULL, generation INTEGER NOT NULL, next_generation INTEGER NOT NULL,
  members TEXT NOT NULL, finished TEXT NOT NULL, created_unix REAL NOT NULL, updated_unix REAL NOT NULL);
CREATE TABLE checkpoints (id TEXT PRIMARY KEY, job_id TEXT NOT NULL, commit_seq INTEGER NOT NULL,
  step INTEGER NOT NULL, epoch INTEGER NOT NULL, generation INTEGER NOT NULL, path TEXT NOT NULL,
  size_bytes INTEGER NOT NULL, sha256 TEXT NOT NULL, created_unix REAL NOT NULL);
INSERT INTO jobs VALUES ('job-old', 1, x'', 2, '', 7, 0, 2, 448, 0, 0, '{}', 0, 3, 4, 'w1,w2', '', 1, 2);
INSERT INTO checkpoints VALUES ('ckpt-5-abcdef', 'job-old', 1, 5, 0, 3, 'job-old/step-5', 10, 'ff', 3);
)sql";
    ASSERT_EQ(sqlite3_exec(db, old_schema, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  auto store = SqliteStateStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto loaded = (*store)->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const JobRecord& job = loaded->jobs.at("job-old");
  EXPECT_EQ(job.generation.number, 3);
  EXPECT_TRUE(job.generation.formed);
  EXPECT_EQ(job.restarts_used, 0);
  EXPECT_EQ(loaded->checkpoints.at("job-old").at(0).samples_in_epoch(), 0);

  // And the new columns are written from now on.
  ClusterState state = *loaded;
  state.jobs.at("job-old").restarts_used = 1;
  ChangeSet changes;
  changes.jobs.insert("job-old");
  ASSERT_TRUE((*store)->Save(state, changes).ok());
  ASSERT_TRUE((*store)->SaveCheckpoint(Checkpoint("ckpt-9-aaaaaa", 9), {}).ok());
  auto again = (*SqliteStateStore::Open(path))->Load(900);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->jobs.at("job-old").restarts_used, 1);
  EXPECT_EQ(again->checkpoints.at("job-running").at(0).samples_in_epoch(), 9 * 64);
}

// The schema of a database written by the coordinator before the
// generation's epoch, samples_in_epoch and heal_from_rank were retired
// (main at 6d14f2a): the first schema plus every added column, in order.
constexpr char kSchemaWithRetiredColumns[] = R"sql(
CREATE TABLE jobs (id TEXT PRIMARY KEY, submit_seq INTEGER NOT NULL, spec BLOB NOT NULL, state INTEGER NOT NULL,
  reason TEXT NOT NULL, step INTEGER NOT NULL, epoch INTEGER NOT NULL, world_size INTEGER NOT NULL,
  samples_in_epoch INTEGER NOT NULL, samples_per_second REAL NOT NULL, loss REAL NOT NULL, eval TEXT NOT NULL,
  total_steps INTEGER NOT NULL, generation INTEGER NOT NULL, next_generation INTEGER NOT NULL,
  members TEXT NOT NULL, finished TEXT NOT NULL, created_unix REAL NOT NULL, updated_unix REAL NOT NULL,
  gen_formed INTEGER NOT NULL DEFAULT 1, gen_reason TEXT NOT NULL DEFAULT '',
  gen_started_unix REAL NOT NULL DEFAULT 0, gen_start_step INTEGER NOT NULL DEFAULT 0,
  gen_epoch INTEGER NOT NULL DEFAULT 0, gen_samples_in_epoch INTEGER NOT NULL DEFAULT 0,
  gen_heal_from_rank INTEGER NOT NULL DEFAULT -1, gen_committed INTEGER NOT NULL DEFAULT 0,
  restarts_used INTEGER NOT NULL DEFAULT 0, last_failure TEXT NOT NULL DEFAULT '',
  waiting_since REAL NOT NULL DEFAULT 0, owner TEXT NOT NULL DEFAULT '',
  release_requested TEXT NOT NULL DEFAULT '{}', warning TEXT NOT NULL DEFAULT '',
  learning_rate REAL NOT NULL DEFAULT 0);
CREATE TABLE workers (id TEXT PRIMARY KEY, address TEXT NOT NULL, device_kind TEXT NOT NULL,
  device_count INTEGER NOT NULL, state INTEGER NOT NULL, job_id TEXT NOT NULL,
  cordoned INTEGER NOT NULL DEFAULT 0);
CREATE TABLE checkpoints (id TEXT PRIMARY KEY, job_id TEXT NOT NULL, commit_seq INTEGER NOT NULL,
  step INTEGER NOT NULL, epoch INTEGER NOT NULL, generation INTEGER NOT NULL, path TEXT NOT NULL,
  size_bytes INTEGER NOT NULL, sha256 TEXT NOT NULL, created_unix REAL NOT NULL,
  samples_in_epoch INTEGER NOT NULL DEFAULT 0);
CREATE INDEX checkpoints_by_job ON checkpoints (job_id, commit_seq);
INSERT INTO jobs VALUES ('job-a', 4, x'0a056d6e697374', 2, '', 42, 1, 2, 2688, 1500.25, 'NaN', '{"accuracy":0.875}',
  900, 3, 4, 'w1,w2', 'w2', 600, 650.5, 1, 'failure_reported', 650.5, 40, 1, 2560, 0, 1, 2,
  'worker w3 (rank 2) lost: lease expired', 0, 'alice', '{"w1":"drain"}', 'low disk', 0.0125);
INSERT INTO jobs VALUES ('job-b', 5, x'6002', 1, 'waiting for workers', 0, 0, 0, 0, 0, 0, '{}',
  0, 0, 1, '', '', 700, 700, 1, '', 0, 0, 0, 0, -1, 0, 0, '', 0, 'bob', '{}', '', 0);
INSERT INTO jobs VALUES ('job-c', 6, x'6002', 1, 'waiting for workers released by lower-priority jobs: have 1, need 2',
  0, 0, 0, 0, 0, 0, '{}', 0, 0, 1, '', '', 710, 710, 1, '', 0, 0, 0, 0, -1, 0, 0, '', 0, 'bob', '{}', '', 0);
INSERT INTO jobs VALUES ('job-d', 7, x'6002', 1,
  'suspended at step 40 for a higher-priority job; resumes from job-d/step-40 when workers are free',
  40, 0, 0, 0, 0, 0, '{}', 0, 0, 2, '', '', 720, 720, 1, '', 0, 0, 0, 0, -1, 0, 0, '', 0, 'bob', '{}', '', 0);
INSERT INTO workers VALUES ('w1', 'w1:29500', 'cuda', 8, 2, 'job-a', 1), ('w2', 'w2:29500', 'cuda', 8, 2, 'job-a', 0);
INSERT INTO checkpoints VALUES ('ckpt-20-bbbbbb', 'job-a', 2, 20, 1, 3, 'job-a/step-20', 1234, 'ab12', 900.5, 1280),
  ('ckpt-30-cccccc', 'job-a', 3, 30, 1, 3, 'job-a/step-30', 1234, 'cd34', 901.5, 1920);
)sql";

std::vector<std::string> JobColumnsIn(const std::string& path) {
  std::vector<std::string> names;
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* select = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info('jobs')", -1, &select, nullptr), SQLITE_OK);
  while (sqlite3_step(select) == SQLITE_ROW) {
    names.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(select, 0)));
  }
  sqlite3_finalize(select);
  sqlite3_close(db);
  return names;
}

// A database written before the retired generation columns went opens with
// every job, worker and checkpoint; the retired columns are dropped.
TEST(SqliteStateStore, OpensADatabaseWithTheRetiredGenerationColumns) {
  const std::string path = FreshDatabasePath("retired_columns");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, kSchemaWithRetiredColumns, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  ASSERT_THAT(JobColumnsIn(path), ::testing::Contains("gen_heal_from_rank"));
  auto store = SqliteStateStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const char* retired : {"gen_epoch", "gen_samples_in_epoch", "gen_heal_from_rank"}) {
    EXPECT_THAT(JobColumnsIn(path), ::testing::Not(::testing::Contains(retired)));
  }
  EXPECT_THAT(JobColumnsIn(path), ::testing::Contains("gen_start_step"));

  auto loaded = (*store)->Load(2000);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->jobs.size(), 4u);
  const JobRecord& a = loaded->jobs.at("job-a");
  EXPECT_EQ(a.submit_seq, 4);
  EXPECT_EQ(a.info.name(), "mnist");
  EXPECT_EQ(a.info.state(), v1::RUNNING);
  EXPECT_EQ(a.info.step(), 42);
  EXPECT_EQ(a.info.epoch(), 1);
  EXPECT_EQ(a.info.samples_in_epoch(), 2688);
  EXPECT_DOUBLE_EQ(a.info.samples_per_second(), 1500.25);
  EXPECT_TRUE(std::isnan(a.info.loss()));
  EXPECT_EQ(a.info.eval().at("accuracy"), 0.875);
  EXPECT_EQ(a.info.total_steps(), 900);
  EXPECT_EQ(a.info.generation(), 3);
  EXPECT_EQ(a.generation.number, 3);
  EXPECT_EQ(a.next_generation, 4);
  EXPECT_THAT(a.generation.members, ElementsAre("w1", "w2"));
  EXPECT_THAT(a.info.workers(), ElementsAre("w1", "w2"));
  EXPECT_THAT(a.generation.finished, ElementsAre("w2"));
  EXPECT_TRUE(a.generation.formed);
  EXPECT_EQ(GenerationStartReasonName(a.generation.reason), "failure_reported");
  EXPECT_DOUBLE_EQ(a.generation.started_at, 650.5);
  EXPECT_EQ(a.generation.start_step, 40);
  EXPECT_TRUE(a.generation.committed);
  EXPECT_EQ(a.restarts_used, 2);
  EXPECT_EQ(a.last_failure, "worker w3 (rank 2) lost: lease expired");
  EXPECT_EQ(a.info.owner(), "alice");
  EXPECT_EQ(ReleaseReasonName(a.release_requested.at("w1")), "drain");
  EXPECT_EQ(a.info.warning(), "low disk");
  EXPECT_DOUBLE_EQ(a.info.learning_rate(), 0.0125);
  const JobRecord& b = loaded->jobs.at("job-b");
  EXPECT_EQ(b.info.state(), v1::PENDING);
  EXPECT_EQ(b.info.reason(), "waiting for workers");
  EXPECT_EQ(b.info.owner(), "bob");
  // Why a PENDING job waits is typed from now on; the rows written before
  // get it from their reason text, once.
  EXPECT_EQ(b.pending_reason, PendingReason::kWaitingForWorkers);
  EXPECT_EQ(loaded->jobs.at("job-c").pending_reason, PendingReason::kWaitingForReleasedWorkers);
  EXPECT_EQ(loaded->jobs.at("job-c").info.reason(),
            "waiting for workers released by lower-priority jobs: have 1, need 2");
  EXPECT_EQ(loaded->jobs.at("job-d").pending_reason, PendingReason::kSuspended);
  EXPECT_EQ(loaded->next_submit_seq, 8);
  {
    // No job releases workers to job-c any more: the scheduler gives it the
    // plain reason back, and leaves the suspended job's alone.
    ClusterState scheduled = *loaded;
    Schedule(scheduled, 2000);
    EXPECT_EQ(scheduled.jobs.at("job-c").info.reason(), "waiting for workers");
    EXPECT_EQ(scheduled.jobs.at("job-c").pending_reason, PendingReason::kWaitingForWorkers);
    EXPECT_EQ(scheduled.jobs.at("job-d").info.reason(), loaded->jobs.at("job-d").info.reason());
    EXPECT_EQ(scheduled.jobs.at("job-b").info.state(), v1::PENDING);
  }

  ASSERT_EQ(loaded->workers.size(), 2u);
  EXPECT_TRUE(loaded->workers.at("w1").cordoned);
  EXPECT_TRUE(loaded->workers.at("w1").labels.empty());  // from before labels: none
  EXPECT_EQ(loaded->workers.at("w2").job_id, "job-a");
  const auto& catalog = loaded->checkpoints.at("job-a");
  ASSERT_EQ(catalog.size(), 2u);
  EXPECT_EQ(catalog[0].id(), "ckpt-20-bbbbbb");
  EXPECT_EQ(catalog[1].samples_in_epoch(), 1920);

  // Writes go on, and the next checkpoint follows the stored commit order.
  ClusterState state = *loaded;
  state.jobs.at("job-a").info.set_step(50);
  ChangeSet changes;
  changes.jobs.insert("job-a");
  ASSERT_TRUE((*store)->Save(state, changes).ok());
  v1::CheckpointInfo next = Checkpoint("ckpt-50-dddddd", 50);
  next.set_job_id("job-a");
  ASSERT_TRUE((*store)->SaveCheckpoint(next, {}).ok());
  store->reset();
  auto again = (*SqliteStateStore::Open(path))->Load(2000);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->jobs.at("job-a").info.step(), 50);
  EXPECT_EQ(again->jobs.at("job-a").generation.start_step, 40);
  ASSERT_EQ(again->checkpoints.at("job-a").size(), 3u);
  EXPECT_EQ(again->checkpoints.at("job-a").back().id(), "ckpt-50-dddddd");
}

// SQLite binds a NaN as NULL, which the NOT NULL columns refused: one job's
// NaN loss then failed every write. Every double a job holds comes back as
// it went in.
TEST_P(StoreTest, NonFiniteValuesRoundTrip) {
  ChangeSet changes;
  ClusterState state = SampleState(&changes);
  v1::JobInfo& info = state.jobs.at("job-running").info;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  info.set_loss(nan);
  info.set_samples_per_second(inf);
  info.set_learning_rate(-inf);
  (*info.mutable_eval())["loss"] = nan;
  (*info.mutable_eval())["perplexity"] = inf;
  (*info.mutable_eval())["margin"] = -inf;
  (*info.mutable_eval())["accuracy"] = -0.0;
  ASSERT_TRUE(Open()->Save(state, changes).ok());

  auto loaded = Open()->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const v1::JobInfo& back = loaded->jobs.at("job-running").info;
  EXPECT_TRUE(std::isnan(back.loss()));
  EXPECT_EQ(back.samples_per_second(), inf);
  EXPECT_EQ(back.learning_rate(), -inf);
  EXPECT_TRUE(std::isnan(back.eval().at("loss")));
  EXPECT_EQ(back.eval().at("perplexity"), inf);
  EXPECT_EQ(back.eval().at("margin"), -inf);
  EXPECT_EQ(back.eval().at("accuracy"), 0.0);
  EXPECT_EQ(back.step(), 42);

  // Finite again later: the column holds a REAL once more.
  info.set_loss(0.25);
  ASSERT_TRUE(Open()->Save(state, changes).ok());
  EXPECT_EQ(Open()->Load(900)->jobs.at("job-running").info.loss(), 0.25);
}

// An id already in the catalog is refused, and the stored entry stays.
TEST_P(StoreTest, ACheckpointIdIsAddedOnlyOnce) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->SaveCheckpoint(Checkpoint("ckpt-10-aaaaaa", 10), {}).ok());
  EXPECT_FALSE(store->SaveCheckpoint(Checkpoint("ckpt-10-aaaaaa", 11), {}).ok());
  auto loaded = Open()->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->checkpoints.at("job-running").size(), 1u);
  EXPECT_EQ(loaded->checkpoints.at("job-running")[0].step(), 10);
}

// `workers` workers loaded, every one BUSY with `job`.
void ExpectEveryWorkerBusyWith(const ClusterState& loaded, const std::string& job, int workers) {
  ASSERT_EQ(loaded.workers.size(), static_cast<size_t>(workers));
  for (const auto& [id, worker] : loaded.workers) {
    EXPECT_EQ(worker.state, v1::BUSY) << id;
    EXPECT_EQ(worker.job_id, job) << id;
  }
}

// 1000 workers registered and a job scheduled on them in one Save: 1001
// records. On etcd that is more than one transaction may hold (128
// operations): the store splits it, and every record comes back.
TEST_P(StoreTest, AThousandWorkerScheduleIsSavedWhole) {
  constexpr int kWorkers = 1000;
  ClusterState state;
  ChangeSet changes = testing::RegisterWorkersAndBigJob(state, kWorkers, 10000);
  changes.Merge(Schedule(state, 601));
  ASSERT_EQ(state.jobs.at("job-big").info.state(), v1::RUNNING);
  ASSERT_EQ(changes.workers.size(), static_cast<size_t>(kWorkers));
  auto store = Open();
  ASSERT_NE(store, nullptr);
  absl::Status saved = store->Save(state, changes);
  ASSERT_TRUE(saved.ok()) << saved;

  auto loaded = Open()->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectEveryWorkerBusyWith(*loaded, "job-big", kWorkers);
  EXPECT_EQ(loaded->jobs.at("job-big").generation.members, state.jobs.at("job-big").generation.members);
}

// Workers registered first, the job scheduled later: the rendezvous is one
// record, the job's, and the workers load busy with it all the same.
TEST_P(StoreTest, ARendezvousSavesOnlyTheJob) {
  constexpr int kWorkers = 1000;
  ClusterState state;
  ChangeSet registered = testing::RegisterWorkersAndBigJob(state, kWorkers, 10000);
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Save(state, registered).ok());

  ChangeSet scheduled = Schedule(state, 601);
  ASSERT_EQ(state.jobs.at("job-big").info.state(), v1::RUNNING);
  EXPECT_EQ(scheduled.jobs, std::set<std::string>{"job-big"});
  EXPECT_THAT(scheduled.workers, ::testing::IsEmpty());
  const StateWrite write = Snapshot(state, scheduled);
  EXPECT_EQ(write.size(), 1u);
  ASSERT_TRUE(store->Write(write).ok());

  auto loaded = Open()->Load(900);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectEveryWorkerBusyWith(*loaded, "job-big", kWorkers);
}

// A job stored while the spec's closed sets were strings (device and
// sync.mode under their former numbers) loads with the same choices as
// enums, and is saved back without the strings.
TEST(SqliteStateStore, JobStoredWithStringChoicesLoadsThemAsEnums) {
  const std::string path = FreshDatabasePath("string_choices");
  {
    auto store = SqliteStateStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ChangeSet changes;
    ASSERT_TRUE((*store)->Save(SampleState(&changes), changes).ok());
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    // name: "mnist", device: "cuda" (field 14), sync { mode: "average" } (field 11, its field 1).
    const char* kOldSpec = "UPDATE jobs SET spec = x'0a056d6e697374720463756461' || x'5a090a0761766572616765' "
                           "WHERE id = 'job-running'";
    ASSERT_EQ(sqlite3_exec(db, kOldSpec, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  auto store = SqliteStateStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto loaded = (*store)->Load(2000);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const v1::JobSpec& spec = loaded->jobs.at("job-running").info.spec();
  EXPECT_EQ(spec.name(), "mnist");
  EXPECT_EQ(spec.device(), v1::DEVICE_CUDA);
  EXPECT_EQ(spec.sync().mode(), v1::SYNC_MODE_AVERAGE);
  v1::JobSpec expected;
  expected.set_name("mnist");
  expected.set_device(v1::DEVICE_CUDA);
  expected.mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
  EXPECT_EQ(spec.SerializeAsString(), expected.SerializeAsString());  // nothing of the strings is kept
}

TEST(SqliteStateStore, OpenFailsClearlyForAnUnwritablePath) {
  auto store = SqliteStateStore::Open("/nonexistent-dir/for/sure/coordinator.db");
  EXPECT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("/nonexistent-dir/for/sure/coordinator.db"), absl::string_view::npos);
}

}  // namespace
}  // namespace herd::coordinator
