// Persistence per job, against a real SQLite database: a NaN loss is stored
// as NaN, one job whose row cannot be written (a trigger refuses it) holds
// back no other job, its users see a storage warning, the write is retried
// with backoff and counted, and a restart moves nothing backwards.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <sqlite3.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "coordinator/coordinator.h"
#include "coordinator/test_stores.h"
#include "coordinator/testing/metric_value.h"

namespace herd::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

class PersistenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = StoreUnavailable(Kind()); !why.empty()) GTEST_SKIP() << why;
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    place_ = std::make_unique<TestStorePlace>(Kind(), "persist-" + name.substr(0, name.find('/')));
    db_path_ = place_->path();
    Restart();
  }

  // SQLite unless a parametrized test says otherwise.
  virtual StoreKind Kind() const { return StoreKind::kSqlite; }

  void Restart() {
    coordinator_.reset();
    std::unique_ptr<StateStore> store = place_->Open();
    ASSERT_NE(store, nullptr);
    CoordinatorOptions options;
    options.run_ticker = false;
    auto coordinator = Coordinator::Create(options, std::move(store), &clock_, &metrics_);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
  }

  ClusterState Stored() {
    std::unique_ptr<StateStore> store = place_->Open();
    EXPECT_NE(store, nullptr);
    auto state = store->Load(clock_.Now());
    EXPECT_TRUE(state.ok()) << state.status();
    return *state;
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

  // A one-worker job running on `worker` as generation 1.
  std::string StartJob(const std::string& worker) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(worker);
    request.set_address(worker + ".example");
    request.set_device_kind("cpu");
    request.set_device_count(1);
    EXPECT_TRUE(coordinator_->RegisterWorker(request).ok());
    v1::JobSpec spec;
    spec.mutable_model()->set_name("mlp");
    spec.mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
    spec.set_batch_size(8);
    auto job = coordinator_->SubmitJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    coordinator_->Tick();
    EXPECT_EQ(coordinator_->GetJob(job->id())->state(), v1::RUNNING);
    return job->id();
  }

  static v1::ReportProgressRequest Progress(const std::string& job_id, int64_t step, double loss) {
    v1::ReportProgressRequest report;
    report.set_job_id(job_id);
    report.set_generation(1);
    report.set_step(step);
    report.set_loss(loss);
    report.set_samples_per_second(100);
    report.set_learning_rate(1e30);
    return report;
  }

  void Finish(const std::string& worker, const std::string& job_id, const v1::ReportProgressRequest& last) {
    v1::HeartbeatRequest heartbeat;
    heartbeat.set_worker_id(worker);
    v1::TrainerExit* exit = heartbeat.add_exits();
    exit->set_job_id(job_id);
    exit->set_generation(1);
    *exit->mutable_final_progress() = last;
    ASSERT_TRUE(coordinator_->Heartbeat(heartbeat).ok());
  }

  std::unique_ptr<TestStorePlace> place_;
  std::string db_path_;  // SQLite
  FakeClock clock_;
  prometheus::Registry registry_;
  Metrics metrics_{registry_};
  std::unique_ptr<Coordinator> coordinator_;
};

// The cases that are about what is stored, not how SQLite fails: on both
// stores.
class StorePersistenceTest : public PersistenceTest, public ::testing::WithParamInterface<StoreKind> {
 protected:
  StoreKind Kind() const override { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Stores, StorePersistenceTest, ::testing::Values(StoreKind::kSqlite, StoreKind::kEtcd),
                         StoreKindName);

TEST_P(StorePersistenceTest, ADivergedJobIsStoredFaithfullyBesideAHealthyOne) {
  const std::string diverged = StartJob("w1");
  const std::string healthy = StartJob("w2");
  v1::ReportProgressRequest nan_report = Progress(diverged, 30, kNaN);
  (*nan_report.mutable_eval())["loss"] = kNaN;
  (*nan_report.mutable_eval())["perplexity"] = kInf;
  ASSERT_TRUE(coordinator_->ReportProgress(nan_report).ok());
  ASSERT_TRUE(coordinator_->ReportProgress(Progress(healthy, 40, 0.25)).ok());
  clock_.Advance(2);
  coordinator_->Tick();
  ClusterState stored = Stored();
  EXPECT_EQ(stored.jobs.at(diverged).info.step(), 30);
  EXPECT_TRUE(std::isnan(stored.jobs.at(diverged).info.loss()));
  EXPECT_TRUE(std::isnan(stored.jobs.at(diverged).info.eval().at("loss")));
  EXPECT_EQ(stored.jobs.at(diverged).info.eval().at("perplexity"), kInf);
  EXPECT_EQ(stored.jobs.at(diverged).info.learning_rate(), 1e30);
  EXPECT_EQ(stored.jobs.at(healthy).info.step(), 40);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_state_write_failures_total", {{"record", "job"}}), std::nullopt)
      << "a job's write failed";

  // Both end; a restart finds both ended, at their final steps.
  Finish("w1", diverged, Progress(diverged, 50, kNaN));
  Finish("w2", healthy, Progress(healthy, 60, 0.125));
  Restart();
  auto diverged_after = coordinator_->GetJob(diverged);
  auto healthy_after = coordinator_->GetJob(healthy);
  EXPECT_EQ(diverged_after->state(), v1::SUCCEEDED);
  EXPECT_EQ(diverged_after->step(), 50);
  EXPECT_TRUE(std::isnan(diverged_after->loss()));
  EXPECT_EQ(healthy_after->state(), v1::SUCCEEDED);
  EXPECT_EQ(healthy_after->step(), 60);
}

// A member left out because its trainer hung (blamed late) stays out across
// a restart of the coordinator (or a new leader), although its daemon
// heartbeats with the job's trainer still running: taking it back would
// re-form the job into its hang and stall it for a collective timeout.
TEST_P(StorePersistenceTest, AHungMemberStaysOutAcrossARestart) {
  for (const char* worker : {"w1", "w2", "w3"}) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(worker);
    request.set_address(std::string(worker) + ".example");
    request.set_device_kind("cpu");
    request.set_device_count(1);
    ASSERT_TRUE(coordinator_->RegisterWorker(request).ok());
  }
  v1::JobSpec spec;
  spec.mutable_model()->set_name("mlp");
  spec.mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
  spec.set_batch_size(8);
  spec.set_min_workers(2);
  spec.set_max_workers(3);
  auto job = coordinator_->SubmitJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  coordinator_->Tick();
  ASSERT_EQ(coordinator_->GetJob(job->id())->workers_size(), 3);
  const auto members = coordinator_->GetJob(job->id())->workers();
  const std::string hung = members[2];

  v1::ReportFailureRequest report;
  report.set_job_id(job->id());
  report.set_generation(1);
  report.set_rank(0);
  report.set_worker_id(members[0]);
  report.set_message("all-reduce timed out");
  report.set_peer_fault(v1::PEER_FAULT_LATE);
  report.set_peer_rank(2);
  report.set_step(17);
  ASSERT_TRUE(coordinator_->ReportFailure(report).ok());
  coordinator_->Tick();
  ASSERT_EQ(coordinator_->GetJob(job->id())->unresponsive_size(), 1);

  Restart();
  // Every daemon heartbeats, the hung trainer still running, for leases on end.
  for (int beat = 0; beat < 5; ++beat) {
    for (const std::string& worker : members) {
      v1::HeartbeatRequest heartbeat;
      heartbeat.set_worker_id(worker);
      heartbeat.add_running_jobs(job->id());
      ASSERT_TRUE(coordinator_->Heartbeat(heartbeat).ok());
    }
    coordinator_->Tick();
    clock_.Advance(10);
  }
  auto after = coordinator_->GetJob(job->id());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->state(), v1::RUNNING);
  ASSERT_EQ(after->unresponsive_size(), 1);
  EXPECT_EQ(after->unresponsive(0).worker_id(), hung);
  EXPECT_EQ(after->unresponsive(0).step(), 17);
  EXPECT_THAT(after->workers(), ::testing::Not(::testing::Contains(hung)));
}

TEST_F(PersistenceTest, ARowThatCannotBeWrittenHoldsBackNoOtherAndIsShownRetriedAndRecovered) {
  const std::string stuck = StartJob("w1");
  const std::string other = StartJob("w2");
  Sql("CREATE TRIGGER refuse BEFORE INSERT ON jobs WHEN NEW.id = '" + stuck +
      "' BEGIN SELECT RAISE(ABORT, 'injected: row refused'); END;");
  ASSERT_TRUE(coordinator_->ReportProgress(Progress(stuck, 10, 1.0)).ok());
  ASSERT_TRUE(coordinator_->ReportProgress(Progress(other, 20, 1.0)).ok());
  clock_.Advance(2);
  coordinator_->Tick();  // both due: one transaction fails, then each alone

  EXPECT_EQ(Stored().jobs.at(other).info.step(), 20);
  EXPECT_EQ(Stored().jobs.at(stuck).info.step(), 0);
  auto job = coordinator_->GetJob(stuck);
  EXPECT_THAT(job->storage_warning(), HasSubstr("cannot persist this job's state since"));
  EXPECT_THAT(job->storage_warning(), HasSubstr("injected: row refused"));
  EXPECT_EQ(job->step(), 10);  // memory holds the newest state
  EXPECT_EQ(coordinator_->GetJob(other)->storage_warning(), "");
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_jobs_unsaved"), 1);
  const double failures =
      MetricValue(registry_, "herd_coordinator_state_write_failures_total", {{"record", "job"}}).value_or(0);
  EXPECT_GE(failures, 1);

  // Retries back off: ticks within the backoff write nothing.
  for (int i = 0; i < 5; ++i) coordinator_->Tick();
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_state_write_failures_total", {{"record", "job"}}), failures);
  clock_.Advance(0.5);
  coordinator_->Tick();
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_state_write_failures_total", {{"record", "job"}}),
            failures + 1);

  // The other job goes on being saved meanwhile.
  ASSERT_TRUE(coordinator_->ReportProgress(Progress(other, 30, 1.0)).ok());
  clock_.Advance(1);
  coordinator_->Tick();
  EXPECT_EQ(Stored().jobs.at(other).info.step(), 30);

  // Storage recovers: the next retry saves the job and the warning goes.
  Sql("DROP TRIGGER refuse;");
  clock_.Advance(8);
  coordinator_->Tick();
  EXPECT_EQ(Stored().jobs.at(stuck).info.step(), 10);
  EXPECT_EQ(coordinator_->GetJob(stuck)->storage_warning(), "");
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_jobs_unsaved"), 0);
}

// The heartbeat that ends a job is answered even when the job's row cannot
// be written (its worker must not lose its lease over the coordinator's
// disk); the end is written once storage recovers, so a restart then finds
// the job SUCCEEDED at its final step.
TEST_F(PersistenceTest, AFinishedJobWhoseWriteFailedIsSavedWhenStorageRecovers) {
  const std::string job_id = StartJob("w1");
  Sql("CREATE TRIGGER refuse BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'injected: disk full'); END;");
  Finish("w1", job_id, Progress(job_id, 90, 0.5));
  EXPECT_EQ(coordinator_->GetJob(job_id)->state(), v1::SUCCEEDED);
  EXPECT_THAT(coordinator_->GetJob(job_id)->storage_warning(), HasSubstr("injected: disk full"));
  EXPECT_EQ(Stored().jobs.at(job_id).info.state(), v1::RUNNING);
  Sql("DROP TRIGGER refuse;");
  clock_.Advance(1);
  coordinator_->Tick();
  Restart();
  EXPECT_EQ(coordinator_->GetJob(job_id)->state(), v1::SUCCEEDED);
  EXPECT_EQ(coordinator_->GetJob(job_id)->step(), 90);
}

TEST_F(PersistenceTest, MalformedProgressIsRefusedNamingTheFieldAndValue) {
  const std::string job_id = StartJob("w1");
  struct Case {
    const char* field;
    std::function<void(v1::ReportProgressRequest&)> spoil;
    const char* value;
  };
  const Case cases[] = {
      {"step", [](auto& r) { r.set_step(-1); }, "-1"},
      {"epoch", [](auto& r) { r.set_epoch(-3); }, "-3"},
      {"samples_in_epoch", [](auto& r) { r.set_samples_in_epoch(-64); }, "-64"},
      {"total_steps", [](auto& r) { r.set_total_steps(INT64_MIN); }, "-9223372036854775808"},
      {"rank", [](auto& r) { r.set_rank(-1); }, "-1"},
      {"samples_per_second", [](auto& r) { r.set_samples_per_second(kNaN); }, "nan"},
      {"samples_per_second", [](auto& r) { r.set_samples_per_second(kInf); }, "inf"},
      {"samples_per_second", [](auto& r) { r.set_samples_per_second(-5); }, "-5"},
      {"learning_rate", [](auto& r) { r.set_learning_rate(-kInf); }, "-inf"},
      {"eval", [](auto& r) { (*r.mutable_eval())[""] = 1; }, "''"},
  };
  for (const Case& c : cases) {
    v1::ReportProgressRequest report = Progress(job_id, 5, 0.5);
    c.spoil(report);
    auto refused = coordinator_->ReportProgress(report);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(refused.status().message()), ::testing::StartsWith(std::string(c.field) + ": "));
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr(c.value));
  }
  EXPECT_EQ(coordinator_->GetJob(job_id)->step(), 0);  // none of them counted
}

// A final report riding with a trainer's exit is checked like any report:
// a malformed one is dropped, the exit itself still counts, and the
// heartbeat is answered (refusing it would cost the worker its lease).
TEST_F(PersistenceTest, AMalformedFinalReportIsDroppedAndTheExitStillCounts) {
  const std::string job_id = StartJob("w1");
  ASSERT_TRUE(coordinator_->ReportProgress(Progress(job_id, 30, 0.5)).ok());
  v1::ReportProgressRequest malformed = Progress(job_id, 40, 0.5);
  malformed.set_samples_in_epoch(-1);
  Finish("w1", job_id, malformed);
  auto job = coordinator_->GetJob(job_id);
  EXPECT_EQ(job->state(), v1::SUCCEEDED);
  EXPECT_EQ(job->step(), 30);
  EXPECT_EQ(job->samples_in_epoch(), 0);
}

}  // namespace
}  // namespace herd::coordinator
