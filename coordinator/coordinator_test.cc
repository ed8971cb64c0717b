#include "coordinator/coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "coordinator/sqlite_state_store.h"
#include "coordinator/testing/metric_value.h"
#include "coordinator/testing/recording_watcher.h"
#include "google/protobuf/unknown_field_set.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_path_ = ::testing::TempDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db_path_ + suffix).c_str());
    Restart();
  }

  // A fresh coordinator on the same database, as after a process restart.
  void Restart() {
    coordinator_.reset();
    auto store = SqliteStateStore::Open(db_path_);
    ASSERT_TRUE(store.ok()) << store.status();
    CoordinatorOptions options;
    options.lease_seconds = 10;
    options.run_ticker = false;
    auto coordinator = Coordinator::Create(options, *std::move(store), &clock_, &metrics_);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
  }

  // What a restart would find: the database read by a second connection.
  ClusterState Stored() {
    auto store = SqliteStateStore::Open(db_path_);
    EXPECT_TRUE(store.ok()) << store.status();
    auto state = (*store)->Load(clock_.Now());
    EXPECT_TRUE(state.ok()) << state.status();
    return *state;
  }

  static v1::JobSpec Spec(int64_t min_workers, int64_t max_workers) {
    v1::JobSpec spec;
    spec.mutable_model()->set_name("mlp");
    spec.mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
    spec.set_batch_size(8);
    spec.set_min_workers(min_workers);
    spec.set_max_workers(max_workers);
    spec.set_seed(1234);
    spec.mutable_checkpoint()->set_keep(2);
    return spec;
  }

  void Register(const std::string& id) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_address(id + ".example:29500");
    request.set_device_kind("cpu");
    request.set_device_count(1);
    ASSERT_TRUE(coordinator_->RegisterWorker(request).ok());
  }

  v1::HeartbeatResponse Heartbeat(const std::string& id, std::vector<v1::TrainerExit> exits = {},
                                  std::vector<std::string> running_jobs = {}) {
    v1::HeartbeatRequest request;
    request.set_worker_id(id);
    for (auto& exit : exits) *request.add_exits() = exit;
    for (auto& job : running_jobs) request.add_running_jobs(job);
    auto response = coordinator_->Heartbeat(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return *response;
  }

  // w1 and w2 running a fresh two-worker job as generation 1.
  std::string StartTwoWorkerJob() {
    Register("w1");
    Register("w2");
    auto job = coordinator_->SubmitJob(Spec(2, 2));
    EXPECT_TRUE(job.ok()) << job.status();
    coordinator_->Tick();
    EXPECT_EQ(coordinator_->GetJob(job->id())->state(), v1::RUNNING);
    return job->id();
  }

  v1::ReportProgressRequest Progress(const std::string& job_id, int64_t step, int64_t generation = 1) {
    v1::ReportProgressRequest report;
    report.set_job_id(job_id);
    report.set_generation(generation);
    report.set_rank(0);
    report.set_step(step);
    return report;
  }

  v1::ReportFailureRequest Failure(const std::string& job_id, int64_t generation, const std::string& worker_id,
                                   int64_t rank) {
    v1::ReportFailureRequest report;
    report.set_job_id(job_id);
    report.set_generation(generation);
    report.set_worker_id(worker_id);
    report.set_rank(rank);
    report.set_message("allreduce timed out after 5 s");
    return report;
  }

  absl::StatusOr<v1::JoinGenerationResponse> Join(const std::string& job_id, const std::string& worker_id) {
    v1::JoinGenerationRequest join;
    join.set_job_id(job_id);
    join.set_worker_id(worker_id);
    return coordinator_->JoinGeneration(join, nullptr);
  }

  v1::CommitCheckpointRequest Checkpoint(const std::string& job_id, int64_t step) {
    v1::CommitCheckpointRequest request;
    request.set_job_id(job_id);
    request.set_generation(1);
    request.set_step(step);
    request.set_path(job_id + "/step-" + std::to_string(step));
    request.set_size_bytes(100);
    request.set_sha256("feed");
    return request;
  }

  std::string db_path_;
  FakeClock clock_;
  prometheus::Registry registry_;
  Metrics metrics_{registry_};
  std::unique_ptr<Coordinator> coordinator_;
};

// A client built while the closed sets were strings sends them under their
// former numbers: the job runs with the choices it asked for.
TEST_F(CoordinatorTest, SubmitFromAnOlderClientKeepsItsStringChoices) {
  v1::JobSpec spec = Spec(1, 1);
  v1::SyncSpec* sync = spec.mutable_sync();
  sync->GetReflection()->MutableUnknownFields(sync)->AddLengthDelimited(1, "average");  // sync.mode
  spec.GetReflection()->MutableUnknownFields(&spec)->AddLengthDelimited(32, "skip_step");  // on_nonfinite
  auto job = coordinator_->SubmitJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().sync().mode(), v1::SYNC_MODE_AVERAGE);
  EXPECT_EQ(job->spec().sync().every(), 8);  // mode average's default
  EXPECT_EQ(job->spec().on_nonfinite(), v1::ON_NONFINITE_SKIP_STEP);

  sync->GetReflection()->MutableUnknownFields(sync)->Clear();
  sync->GetReflection()->MutableUnknownFields(sync)->AddLengthDelimited(1, "gossip");
  auto rejected = coordinator_->SubmitJob(spec);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rejected.status().message(), "sync.mode: unknown value 'gossip' (expected one of: allreduce, average)");
}

TEST_F(CoordinatorTest, SubmitDefaultsValidatesAndPersistsBeforeReturning) {
  auto job = coordinator_->SubmitJob(Spec(1, 1));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->id(), MatchesRegex("job-[0-9a-f]{8}"));
  EXPECT_EQ(job->state(), v1::PENDING);
  EXPECT_EQ(job->name(), "mlp");                     // defaulted from the model
  EXPECT_EQ(job->spec().optimizer().name(), v1::OPTIMIZER_NAME_SGD);  // defaults applied
  EXPECT_EQ(Stored().jobs.at(job->id()).info.state(), v1::PENDING);

  v1::JobSpec bad = Spec(1, 1);
  bad.set_batch_size(0);
  auto rejected = coordinator_->SubmitJob(bad);
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rejected.status().message()), StartsWith("batch_size"));
  EXPECT_EQ(coordinator_->ListJobs().size(), 1u);
}

TEST_F(CoordinatorTest, ListJobsNewestFirst) {
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(coordinator_->SubmitJob(Spec(1, 1))->id());
  std::vector<std::string> listed;
  for (const auto& job : coordinator_->ListJobs()) listed.push_back(job.id());
  EXPECT_THAT(listed, ElementsAre(ids[2], ids[1], ids[0]));
}

// RenewLease answers only what needs no write (the service answers those
// inline); a heartbeat that changes state is left to Heartbeat. Either way
// each heartbeat is counted once.
TEST_F(CoordinatorTest, RenewLeaseAnswersOnlyHeartbeatsThatChangeNothing) {
  Register("w1");
  Heartbeat("w1");  // the first one is heard: a change
  v1::HeartbeatRequest alive;
  alive.set_worker_id("w1");
  ASSERT_TRUE(coordinator_->RenewLease(alive).has_value());
  v1::HeartbeatRequest draining = alive;
  draining.set_draining(true);
  EXPECT_FALSE(coordinator_->RenewLease(draining).has_value());
  v1::HeartbeatRequest stranger;
  stranger.set_worker_id("stranger");
  auto answer = coordinator_->RenewLease(stranger);
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->reregister());
  ASSERT_TRUE(coordinator_->Heartbeat(draining).ok());
  // Heard, alive, the stranger's, draining (RenewLease's refusal counts nothing).
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_heartbeats_total"), 4);
}

TEST_F(CoordinatorTest, TickStartsJobAndHeartbeatsCarryAssignments) {
  const std::string job_id = StartTwoWorkerJob();
  auto w1 = Heartbeat("w1");
  ASSERT_EQ(w1.assignments_size(), 1);
  EXPECT_EQ(w1.assignments(0).job_id(), job_id);
  EXPECT_EQ(w1.assignments(0).generation(), 1);
  EXPECT_EQ(w1.assignments(0).rank(), 0);
  EXPECT_EQ(Heartbeat("w2").assignments(0).rank(), 1);
  EXPECT_TRUE(Heartbeat("stranger").reregister());

  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_jobs", {{"state", "running"}}), 1);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_workers_alive"), 2);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_generations_started_total", {{"reason", "start"}}), 1);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_heartbeats_total"), 3);
}

TEST_F(CoordinatorTest, CleanExitsInHeartbeatsFinishTheJob) {
  const std::string job_id = StartTwoWorkerJob();
  v1::TrainerExit exit;
  exit.set_job_id(job_id);
  exit.set_generation(1);
  exit.set_exit_code(0);
  EXPECT_EQ(Heartbeat("w1", {exit}).assignments_size(), 0);
  EXPECT_EQ(coordinator_->GetJob(job_id)->state(), v1::RUNNING);
  Heartbeat("w2", {exit});
  EXPECT_EQ(coordinator_->GetJob(job_id)->state(), v1::SUCCEEDED);
  EXPECT_EQ(Stored().jobs.at(job_id).info.state(), v1::SUCCEEDED);
  for (const auto& worker : coordinator_->ListWorkers()) EXPECT_EQ(worker.state(), v1::IDLE) << worker.id();
}

// A rank that exits OK with its final report passed the final commit point
// with every rank: a member lost after it (killed before its own exit) does
// not re-form the job, whose training is complete.
TEST_F(CoordinatorTest, AMemberLostAfterAnotherFinishedTrainingCostsNothing) {
  const std::string job_id = StartTwoWorkerJob();
  v1::TrainerExit done;
  done.set_job_id(job_id);
  done.set_generation(1);
  done.set_exit_code(0);
  done.mutable_final_progress()->set_rank(0);
  done.mutable_final_progress()->set_step(400);
  Heartbeat("w1", {done});
  v1::TrainerExit killed;
  killed.set_job_id(job_id);
  killed.set_generation(1);
  killed.set_exit_code(137);
  Heartbeat("w2", {killed});
  auto job = coordinator_->GetJob(job_id);
  EXPECT_EQ(job->state(), v1::SUCCEEDED) << job->DebugString();
  EXPECT_EQ(job->generation(), 1);
  EXPECT_EQ(job->step(), 400);
}

// The same in the other order: the lost member's exit arrives first and the
// job re-forms; the finished rank's exit, from the older generation, still
// ends the job as SUCCEEDED instead of leaving a generation that can only
// fail for want of the state.
TEST_F(CoordinatorTest, FinishedTrainingEndsTheJobEvenAfterAReform) {
  const std::string job_id = StartTwoWorkerJob();
  v1::TrainerExit killed;
  killed.set_job_id(job_id);
  killed.set_generation(1);
  killed.set_exit_code(137);
  Heartbeat("w2", {killed});
  ASSERT_EQ(coordinator_->GetJob(job_id)->state(), v1::RUNNING);
  ASSERT_EQ(coordinator_->GetJob(job_id)->generation(), 2);
  v1::TrainerExit done;
  done.set_job_id(job_id);
  done.set_generation(1);
  done.set_exit_code(0);
  done.mutable_final_progress()->set_rank(0);
  done.mutable_final_progress()->set_step(400);
  Heartbeat("w1", {done});
  auto job = coordinator_->GetJob(job_id);
  EXPECT_EQ(job->state(), v1::SUCCEEDED) << job->DebugString();
  EXPECT_EQ(job->step(), 400);
}

// Once serving, a restarted coordinator gives its members a lease plus the
// restart grace to come back: their reconnect backoff after the outage is not
// silence. Past that they are lost as usual.
TEST_F(CoordinatorTest, RestartGivesMembersAGraceBeforeTheirLeasesRunOut) {
  const std::string job_id = StartTwoWorkerJob();
  clock_.Advance(8);  // the outage: nobody heartbeats
  Restart();
  coordinator_->StartServing();
  clock_.Advance(10 + Coordinator::kRestartGraceSeconds - 1);
  coordinator_->Tick();
  EXPECT_EQ(coordinator_->GetJob(job_id)->generation(), 1);
  EXPECT_FALSE(Heartbeat("w1", {}, {job_id}).reregister());
  clock_.Advance(2);
  coordinator_->Tick();
  EXPECT_EQ(coordinator_->GetJob(job_id)->generation(), 2);  // w2 never came back
}

// Before generations, the lost member failed the job; now the survivor waits
// for a replacement and the job goes on in a new generation.
TEST_F(CoordinatorTest, RestartKeepsRunningJobThenALostMemberIsReplaced) {
  const std::string job_id = StartTwoWorkerJob();
  Restart();
  auto job = coordinator_->GetJob(job_id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::RUNNING);
  EXPECT_THAT(job->workers(), ElementsAre("w1", "w2"));

  Register("w1");  // the daemon re-registers after the restart
  auto w1 = Heartbeat("w1", {}, {job_id});
  ASSERT_EQ(w1.assignments_size(), 1);
  EXPECT_EQ(w1.assignments(0).generation(), 1);

  // w2 never comes back: a full lease after the restart it is dead.
  clock_.Advance(6);
  Heartbeat("w1", {}, {job_id});
  clock_.Advance(5);
  coordinator_->Tick();
  job = coordinator_->GetJob(job_id);
  EXPECT_EQ(job->state(), v1::RUNNING);
  EXPECT_EQ(job->reason(), "waiting for workers: have 1, need 2");
  EXPECT_EQ(job->generation(), 2);
  EXPECT_THAT(job->workers(), ElementsAre("w1"));
  ClusterState stored = Stored();
  EXPECT_EQ(stored.jobs.at(job_id).generation.number, 2);
  EXPECT_FALSE(stored.jobs.at(job_id).generation.formed);
  EXPECT_EQ(stored.jobs.at(job_id).restarts_used, 1);
  EXPECT_EQ(stored.workers.at("w2").state, v1::DEAD);
  EXPECT_TRUE(Heartbeat("w2").reregister());
  EXPECT_EQ(Heartbeat("w1").assignments(0).generation(), 2);

  Register("w3");
  coordinator_->Tick();
  job = coordinator_->GetJob(job_id);
  EXPECT_EQ(job->reason(), "");
  EXPECT_THAT(job->workers(), ElementsAre("w1", "w3"));
  EXPECT_TRUE(Stored().jobs.at(job_id).generation.formed);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_generations_started_total", {{"reason", "member_lost"}}), 1);
}

TEST_F(CoordinatorTest, ProgressReachesTheDatabaseAtMostOncePerSecond) {
  const std::string job_id = StartTwoWorkerJob();
  ASSERT_TRUE(coordinator_->ReportProgress(Progress(job_id, 1)).ok());
  EXPECT_EQ(coordinator_->GetJob(job_id)->step(), 1);  // visible at once
  EXPECT_EQ(Stored().jobs.at(job_id).info.step(), 0);  // written later

  clock_.Advance(1);
  ASSERT_TRUE(coordinator_->ReportProgress(Progress(job_id, 2)).ok());
  EXPECT_EQ(Stored().jobs.at(job_id).info.step(), 2);

  ASSERT_TRUE(coordinator_->ReportProgress(Progress(job_id, 3)).ok());
  EXPECT_EQ(Stored().jobs.at(job_id).info.step(), 2);
  clock_.Advance(1);
  coordinator_->Tick();  // the ticker writes what is due
  EXPECT_EQ(Stored().jobs.at(job_id).info.step(), 3);

  ASSERT_TRUE(coordinator_->ReportProgress(Progress(job_id, 4)).ok());
  coordinator_->Shutdown();  // and nothing is lost on a clean stop
  EXPECT_EQ(Stored().jobs.at(job_id).info.step(), 4);
}

TEST_F(CoordinatorTest, ProgressAnswersCancelled) {
  const std::string job_id = StartTwoWorkerJob();
  EXPECT_FALSE(coordinator_->ReportProgress(Progress(job_id, 1))->cancelled());
  ASSERT_TRUE(coordinator_->CancelJob(job_id).ok());
  auto report = Progress(job_id, 2);
  report.set_rank(1);
  EXPECT_TRUE(coordinator_->ReportProgress(report)->cancelled());
  EXPECT_EQ(coordinator_->GetJob(job_id)->step(), 1);
}

TEST_F(CoordinatorTest, OtherGenerationsAreFenced) {
  const std::string job_id = StartTwoWorkerJob();
  const std::string expected = "job " + job_id + ": generation 2 is not current (current: 1)";
  v1::KvSetRequest set;
  set.set_job_id(job_id);
  set.set_generation(2);
  set.set_key("k");
  absl::Status status = coordinator_->KvSet(set);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), expected);

  v1::KvAddRequest add;
  add.set_job_id(job_id);
  add.set_generation(2);
  add.set_key("k");
  EXPECT_EQ(coordinator_->KvAdd(add).status().message(), expected);
  v1::KvGetRequest get;
  get.set_job_id(job_id);
  get.set_generation(2);
  get.set_key("k");
  EXPECT_EQ(coordinator_->KvGet(get, nullptr).status().message(), expected);

  auto progress = Progress(job_id, 1);
  progress.set_generation(2);
  EXPECT_EQ(coordinator_->ReportProgress(progress).status().message(), expected);
  auto checkpoint = Checkpoint(job_id, 1);
  checkpoint.set_generation(2);
  EXPECT_EQ(coordinator_->CommitCheckpoint(checkpoint).status().message(), expected);

  set.set_generation(1);
  EXPECT_TRUE(coordinator_->KvSet(set).ok());
  // A final job's KV scope is gone.
  ASSERT_TRUE(coordinator_->CancelJob(job_id).ok());
  EXPECT_EQ(coordinator_->KvSet(set).code(), absl::StatusCode::kFailedPrecondition);
}

// A record delivered again (its answer was lost, or the worker daemon
// delivers what an exited trainer left) is answered with the entry listed,
// even once its generation ended: never listed twice, never refused, so the
// daemon never removes a recorded checkpoint. A step written again (after a
// rollback) replaces its entry without handing its own path back to delete.
TEST_F(CoordinatorTest, CheckpointDeliveredAgainIsListedOnceAndARewrittenStepKeepsItsFolder) {
  const std::string job_id = StartTwoWorkerJob();
  auto first = coordinator_->CommitCheckpoint(Checkpoint(job_id, 100));
  ASSERT_TRUE(first.ok()) << first.status();
  auto again = coordinator_->CommitCheckpoint(Checkpoint(job_id, 100));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->checkpoint().id(), first->checkpoint().id());
  EXPECT_EQ(coordinator_->ListCheckpoints(job_id)->size(), 1u);

  auto rewritten = Checkpoint(job_id, 100);
  rewritten.set_sha256("beef");
  auto replaced = coordinator_->CommitCheckpoint(rewritten);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_NE(replaced->checkpoint().id(), first->checkpoint().id());
  EXPECT_TRUE(replaced->delete_paths().empty()) << "the folder is the new entry's";
  auto listed = coordinator_->ListCheckpoints(job_id);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].sha256(), "beef");
  EXPECT_EQ(Stored().checkpoints.at(job_id).size(), 1u);

  // Its generation ends; the same record comes again and is still answered.
  ASSERT_TRUE(coordinator_->ReportFailure(Failure(job_id, 1, "w2", 1)).ok());
  auto late = coordinator_->CommitCheckpoint(rewritten);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->checkpoint().id(), replaced->checkpoint().id());
  auto fenced = Checkpoint(job_id, 200);
  EXPECT_EQ(coordinator_->CommitCheckpoint(fenced).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, CheckpointCatalogKeepsNewestAndHandsBackOldPaths) {
  const std::string job_id = StartTwoWorkerJob();
  auto first = coordinator_->CommitCheckpoint(Checkpoint(job_id, 100));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(first->checkpoint().id(), MatchesRegex("ckpt-100-[0-9a-f]{6}"));
  EXPECT_TRUE(first->delete_paths().empty());
  ASSERT_TRUE(coordinator_->CommitCheckpoint(Checkpoint(job_id, 200)).ok());
  auto third = coordinator_->CommitCheckpoint(Checkpoint(job_id, 300));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_THAT(third->delete_paths(), ElementsAre(job_id + "/step-100"));

  auto listed = coordinator_->ListCheckpoints(job_id);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].step(), 300);  // newest first
  EXPECT_EQ((*listed)[1].step(), 200);
  EXPECT_EQ(Stored().checkpoints.at(job_id).size(), 2u);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_checkpoints_recorded_total"), 3);

  v1::JoinGenerationRequest join;
  join.set_job_id(job_id);
  join.set_worker_id("w2");
  EXPECT_EQ(coordinator_->JoinGeneration(join, nullptr)->checkpoint_path(), job_id + "/step-300");

  auto escaping = Checkpoint(job_id, 400);
  escaping.set_path("../../etc");
  EXPECT_EQ(coordinator_->CommitCheckpoint(escaping).status().code(), absl::StatusCode::kInvalidArgument);
  escaping.set_path("/abs/path");
  EXPECT_EQ(coordinator_->CommitCheckpoint(escaping).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->ListCheckpoints("job-unknown").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, JoinGenerationWaitsForAPendingJobToStart) {
  auto job = coordinator_->SubmitJob(Spec(1, 1));
  ASSERT_TRUE(job.ok());
  Register("w1");
  v1::JoinGenerationRequest join;
  join.set_job_id(job->id());
  join.set_worker_id("w1");
  join.set_wait_ms(0);
  EXPECT_EQ(coordinator_->JoinGeneration(join, nullptr).status().code(), absl::StatusCode::kDeadlineExceeded);

  join.set_wait_ms(60000);
  absl::Notification waiting;
  std::thread scheduler([&] {
    waiting.WaitForNotification();
    coordinator_->Tick();
  });
  // The cancellation check runs just before each wait: the first call proves
  // the join is waiting, and the Tick above then starts the job.
  auto joined = coordinator_->JoinGeneration(join, [&] {
    if (!waiting.HasBeenNotified()) waiting.Notify();
    return false;
  });
  scheduler.join();
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->generation(), 1);
  EXPECT_EQ(joined->rank(), 0);
  EXPECT_EQ(joined->world_size(), 1);
  EXPECT_EQ(joined->seed(), 1234u);
  EXPECT_EQ(joined->kv_prefix(), job->id() + "/1/");
  ASSERT_EQ(joined->peers_size(), 1);
  EXPECT_EQ(joined->peers(0).address(), "w1.example:29500");
  EXPECT_EQ(joined->spec().batch_size(), 8);
  EXPECT_EQ(joined->checkpoint_path(), "");
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_rendezvous_duration_seconds"), 1);

  // A non-member waits to be admitted (re-admission after its lease lapsed)
  // and is told why when the wait ends.
  join.set_worker_id("w9");
  join.set_wait_ms(50);
  auto outsider = coordinator_->JoinGeneration(join, nullptr);
  EXPECT_EQ(outsider.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(outsider.status().message()),
              ::testing::HasSubstr("w9 is not a member of job " + job->id() + " generation 1"));
  ASSERT_TRUE(coordinator_->CancelJob(job->id()).ok());
  auto cancelled = coordinator_->JoinGeneration(join, nullptr);
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cancelled.status().message(), "job " + job->id() + " is CANCELLED");
}

// Heartbeats that only say "alive" renew the lease outside the state (the
// lease table) and never take the lock exclusively; lease expiry must still
// see every one of them, and still expire a silent worker.
TEST_F(CoordinatorTest, AliveOnlyHeartbeatsKeepTheLeaseAndSilenceStillEndsIt) {
  const std::string job = StartTwoWorkerJob();
  Heartbeat("w1", {}, {job});  // the first one records what w1 runs
  Heartbeat("w2", {}, {job});
  for (int beat = 0; beat < 4; ++beat) {
    clock_.Advance(6);  // more than a lease in all, less between two beats
    const v1::HeartbeatResponse response = Heartbeat("w1", {}, {job});
    ASSERT_EQ(response.assignments_size(), 1) << "beat " << beat;
    EXPECT_EQ(response.assignments(0).job_id(), job);
    coordinator_->Tick();
  }
  std::map<std::string, v1::WorkerInfo> workers;
  for (const v1::WorkerInfo& worker : coordinator_->ListWorkers()) workers[worker.id()] = worker;
  EXPECT_NE(workers.at("w1").state(), v1::DEAD) << "a heartbeating worker was judged dead";
  EXPECT_DOUBLE_EQ(workers.at("w1").last_heartbeat_unix(), clock_.Now());
  EXPECT_EQ(workers.at("w2").state(), v1::DEAD) << "a silent worker kept its lease";
  // A dead worker's heartbeat renews nothing: it is asked to re-register.
  EXPECT_TRUE(Heartbeat("w2", {}, {job}).reregister());
}

// A rendezvous: every rank waits on the join board at once, and each gets
// the same generation with its own rank and every peer's address.
TEST_F(CoordinatorTest, ManyRanksJoinOneGenerationTogether) {
  constexpr int kRanks = 48;
  std::vector<std::string> ids;
  for (int i = 0; i < kRanks; ++i) {
    ids.push_back(absl::StrCat("w", 100 + i));  // id order = rank order
    Register(ids.back());
  }
  auto job = coordinator_->SubmitJob(Spec(kRanks, kRanks));
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<absl::StatusOr<v1::JoinGenerationResponse>> joined(kRanks, absl::UnknownError("not joined"));
  std::atomic<int> waiting{0};
  std::vector<std::thread> ranks;
  for (int i = 0; i < kRanks; ++i) {
    ranks.emplace_back([&, i] {
      v1::JoinGenerationRequest join;
      join.set_job_id(job->id());
      join.set_worker_id(ids[i]);
      join.set_wait_ms(60000);
      bool counted = false;
      joined[i] = coordinator_->JoinGeneration(join, [&] {
        if (!counted) ++waiting;
        counted = true;
        return false;
      });
    });
  }
  while (waiting.load() < kRanks) std::this_thread::yield();
  coordinator_->Tick();
  for (std::thread& rank : ranks) rank.join();
  for (int i = 0; i < kRanks; ++i) {
    ASSERT_TRUE(joined[i].ok()) << ids[i] << ": " << joined[i].status();
    EXPECT_EQ(joined[i]->generation(), 1);
    EXPECT_EQ(joined[i]->rank(), i);
    EXPECT_EQ(joined[i]->world_size(), kRanks);
    ASSERT_EQ(joined[i]->peers_size(), kRanks);
    EXPECT_EQ(joined[i]->peers(kRanks - 1).address(), ids.back() + ".example:29500");
  }
  EXPECT_EQ(Stored().jobs.at(job->id()).generation.members, ids) << "answered before the generation was written";
}

TEST_F(CoordinatorTest, ShutdownEndsWaitingCalls) {
  auto job = coordinator_->SubmitJob(Spec(1, 1));
  v1::JoinGenerationRequest join;
  join.set_job_id(job->id());
  join.set_worker_id("w1");
  join.set_wait_ms(60000);
  absl::Notification waiting;
  std::thread stopper([&] {
    waiting.WaitForNotification();
    coordinator_->Shutdown();
  });
  auto joined = coordinator_->JoinGeneration(join, [&] {
    if (!waiting.HasBeenNotified()) waiting.Notify();
    return false;
  });
  stopper.join();
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kUnavailable);
}

// A watcher gets the job at once, then its changes, and only those.
TEST_F(CoordinatorTest, WatchJobDeliversNewVersions) {
  auto job = coordinator_->SubmitJob(Spec(1, 1));
  ASSERT_TRUE(job.ok()) << job.status();
  auto watcher = std::make_shared<RecordingWatcher>();
  auto watch = coordinator_->WatchJob(job->id(), watcher);
  ASSERT_TRUE(watch.ok()) << watch.status();
  auto first = watcher->Await([](const JobSnapshot&) { return true; }, absl::Seconds(60));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->info.state(), v1::PENDING);
  ASSERT_TRUE(coordinator_->GetJob(job->id()).ok());
  EXPECT_EQ(watcher->Seen().size(), 1u) << "handed a snapshot without a change";
  ASSERT_TRUE(coordinator_->CancelJob(job->id()).ok());
  auto changed = watcher->Await([&](const JobSnapshot& seen) { return seen.version != first->version; },
                                absl::Seconds(60));
  ASSERT_TRUE(changed.has_value());
  EXPECT_EQ(changed->info.state(), v1::CANCELLED);
  coordinator_->StopWatching(*watch);
  EXPECT_TRUE(coordinator_->AwaitJobWatchers(0, absl::Seconds(60)));
  auto stranger = std::make_shared<RecordingWatcher>();
  EXPECT_EQ(coordinator_->WatchJob("job-nope", stranger).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(stranger->Seen().empty());
}


// Each rank learns every rank's labels, and with sync.islands_by the ranks
// come grouped by island, islands by value.
TEST_F(CoordinatorTest, PeersCarryTheirWorkersLabelsInIslandOrder) {
  for (const auto& [id, site] : std::vector<std::pair<std::string, std::string>>{
           {"w1", "west"}, {"w2", "east"}, {"w3", "west"}, {"w4", ""}}) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_address(id + ".example:29500");
    request.set_device_kind("cpu");
    if (!site.empty()) (*request.mutable_labels())["site"] = site;
    ASSERT_TRUE(coordinator_->RegisterWorker(request).ok());
  }
  v1::JobSpec spec = Spec(1, 4);
  spec.mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
  spec.mutable_sync()->set_islands_by("site");
  auto job = coordinator_->SubmitJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  coordinator_->Tick();
  v1::JoinGenerationRequest join;
  join.set_job_id(job->id());
  join.set_worker_id("w1");
  join.set_wait_ms(1000);
  auto joined = coordinator_->JoinGeneration(join, nullptr);
  ASSERT_TRUE(joined.ok()) << joined.status();
  ASSERT_EQ(joined->peers_size(), 3);  // w4 has no site
  EXPECT_EQ(joined->rank(), 1);
  const std::vector<std::pair<std::string, std::string>> expected = {{"w2", "east"}, {"w1", "west"}, {"w3", "west"}};
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(joined->peers(rank).rank(), rank);
    EXPECT_EQ(joined->peers(rank).worker_id(), expected[rank].first);
    ASSERT_EQ(joined->peers(rank).labels().size(), 1u);
    EXPECT_EQ(joined->peers(rank).labels().at("site"), expected[rank].second);
  }
}

TEST_F(CoordinatorTest, WorkerLabelsAreListedStoredAndExported) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id("w1");
  request.set_address("w1.example:29500");
  request.set_device_kind("cpu");
  (*request.mutable_labels())["topology.zone"] = "us-east-1a";
  ASSERT_TRUE(coordinator_->RegisterWorker(request).ok());
  Register("w2");
  coordinator_->Tick();
  const std::vector<v1::WorkerInfo> workers = coordinator_->ListWorkers();
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[0].labels().at("topology.zone"), "us-east-1a");
  EXPECT_TRUE(workers[1].labels().empty());
  EXPECT_EQ(Stored().workers.at("w1").labels.at("topology.zone"), "us-east-1a");
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_worker_labels",
                        {{"worker", "w1"}, {"label_topology_zone", "us-east-1a"}}),
            1);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_worker_labels", {{"worker", "w2"}}), 1);

  // Registered again with other labels: the old series goes.
  (*request.mutable_labels())["topology.zone"] = "us-east-1b";
  ASSERT_TRUE(coordinator_->RegisterWorker(request).ok());
  coordinator_->Tick();
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_worker_labels", {{"label_topology_zone", "us-east-1a"}}),
            std::nullopt);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_worker_labels",
                        {{"worker", "w1"}, {"label_topology_zone", "us-east-1b"}}),
            1);

  // A label that is not one is refused, naming it.
  (*request.mutable_labels())["topology.zone"] = "us east";
  auto refused = coordinator_->RegisterWorker(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "labels: value 'us east' of label 'topology.zone' may only contain letters, digits, '-', '_' and '.'");
}

TEST_F(CoordinatorTest, RegistrationIsValidated) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id("bad id!");
  request.set_address("a");
  request.set_device_kind("cpu");
  EXPECT_EQ(coordinator_->RegisterWorker(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_worker_id("w1");
  auto response = coordinator_->RegisterWorker(request);
  ASSERT_TRUE(response.ok());
  EXPECT_DOUBLE_EQ(response->lease_seconds(), 10);
  EXPECT_DOUBLE_EQ(response->heartbeat_interval_seconds(), 1);
  EXPECT_EQ(Stored().workers.at("w1").state, v1::IDLE);
}

TEST_F(CoordinatorTest, ReportedFailureStartsAPersistedGenerationThatJoinsResumeFrom) {
  const std::string job_id = StartTwoWorkerJob();
  auto progress = Progress(job_id, 7);
  progress.set_epoch(1);
  progress.set_samples_in_epoch(112);
  ASSERT_TRUE(coordinator_->ReportProgress(progress).ok());

  ASSERT_TRUE(coordinator_->ReportFailure(Failure(job_id, 1, "w2", 1)).ok());
  // Persisted at once, with the committed state it resumes from.
  const JobRecord stored = Stored().jobs.at(job_id);
  EXPECT_EQ(stored.generation.number, 2);
  EXPECT_EQ(GenerationStartReasonName(stored.generation.reason), "failure_reported");
  EXPECT_EQ(stored.generation.start_step, 7);
  EXPECT_EQ(stored.info.step(), 7);
  EXPECT_EQ(stored.restarts_used, 1);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_generations_started_total", {{"reason", "failure_reported"}}), 1);

  auto joined = Join(job_id, "w2");
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->generation(), 2);
  EXPECT_EQ(joined->rank(), 1);
  EXPECT_EQ(joined->start_step(), 7);
  EXPECT_EQ(joined->kv_prefix(), job_id + "/2/");
  EXPECT_EQ(Heartbeat("w1").assignments(0).generation(), 2);

  // The other rank's report of the same failure is fenced, and so is the
  // rest of generation 1.
  absl::Status late = coordinator_->ReportFailure(Failure(job_id, 1, "w1", 0));
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(late.message(), "job " + job_id + ": generation 1 is not current (current: 2)");
  EXPECT_EQ(coordinator_->ReportProgress(Progress(job_id, 8)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(coordinator_->ReportProgress(Progress(job_id, 8, 2)).ok());
}

TEST_F(CoordinatorTest, FirstJoinStartsFromScratchWithNobodyToHealFrom) {
  const std::string job_id = StartTwoWorkerJob();
  auto joined = Join(job_id, "w1");
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->start_step(), 0);
}

TEST_F(CoordinatorTest, JoinWaitsWhileTheGenerationFormsAndRefusesFormerMembers) {
  const std::string job_id = StartTwoWorkerJob();
  clock_.Advance(6);
  Heartbeat("w1");
  clock_.Advance(5);
  coordinator_->Tick();  // w2 lost: w1 waits for a second worker
  ASSERT_EQ(coordinator_->GetJob(job_id)->generation(), 2);

  v1::JoinGenerationRequest join;
  join.set_job_id(job_id);
  join.set_worker_id("w1");
  join.set_wait_ms(0);
  auto waiting = coordinator_->JoinGeneration(join, nullptr);
  EXPECT_EQ(waiting.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(waiting.status().message()), ::testing::HasSubstr("waiting for workers: have 1, need 2"));
  auto former = Join(job_id, "w2");  // not a member: no place, only a wait
  EXPECT_EQ(former.status().code(), absl::StatusCode::kDeadlineExceeded);

  Register("w3");
  join.set_wait_ms(60000);
  absl::Notification waiting_started;
  std::thread ticker([&] {
    waiting_started.WaitForNotification();
    coordinator_->Tick();
  });
  auto joined = coordinator_->JoinGeneration(join, [&] {
    if (!waiting_started.HasBeenNotified()) waiting_started.Notify();
    return false;
  });
  ticker.join();
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->generation(), 2);
  EXPECT_EQ(joined->world_size(), 2);
}

TEST_F(CoordinatorTest, JobWaitingTooLongBelowMinWorkersFails) {
  const std::string job_id = StartTwoWorkerJob();
  clock_.Advance(11);
  Heartbeat("w1");
  coordinator_->Tick();
  clock_.Advance(61);
  Heartbeat("w1");
  coordinator_->Tick();
  auto job = coordinator_->GetJob(job_id);
  EXPECT_EQ(job->state(), v1::FAILED);
  EXPECT_EQ(job->reason(), "fewer than min_workers (2) workers for 60 seconds");
  EXPECT_EQ(Stored().jobs.at(job_id).info.state(), v1::FAILED);
}

TEST_F(CoordinatorTest, RestartKeepsTheGenerationWhenEveryTrainerStillRuns) {
  const std::string job_id = StartTwoWorkerJob();
  Restart();
  Heartbeat("w1", {}, {job_id});
  Heartbeat("w2", {}, {job_id});
  coordinator_->Tick();
  EXPECT_EQ(coordinator_->GetJob(job_id)->generation(), 1);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_generations_started_total", {{"reason", "coordinator_restart"}}),
            std::nullopt);
}

TEST_F(CoordinatorTest, RestartStartsANewGenerationWhenATrainerIsGone) {
  const std::string job_id = StartTwoWorkerJob();
  Restart();
  Heartbeat("w1", {}, {job_id});
  Heartbeat("w2");  // its trainer did not survive
  coordinator_->Tick();
  auto job = coordinator_->GetJob(job_id);
  EXPECT_EQ(job->generation(), 2);
  EXPECT_THAT(job->workers(), ElementsAre("w1", "w2"));
  EXPECT_EQ(Stored().jobs.at(job_id).restarts_used, 0);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_generations_started_total", {{"reason", "coordinator_restart"}}),
            1);
}

TEST_F(CoordinatorTest, NonZeroExitIsAMemberFailureAndAStaleExitIsIgnored) {
  Register("w1");
  Register("w2");
  auto submitted = coordinator_->SubmitJob(Spec(1, 2));
  ASSERT_TRUE(submitted.ok());
  const std::string job_id = submitted->id();
  coordinator_->Tick();
  v1::TrainerExit crash;
  crash.set_job_id(job_id);
  crash.set_generation(1);
  crash.set_exit_code(134);
  crash.set_message("SIGABRT");
  EXPECT_EQ(Heartbeat("w2", {crash}).assignments_size(), 0);
  auto job = coordinator_->GetJob(job_id);
  EXPECT_EQ(job->state(), v1::RUNNING);
  EXPECT_EQ(job->generation(), 2);
  EXPECT_THAT(job->workers(), ElementsAre("w1"));
  // Reported again (or late) for generation 1: ignored.
  Heartbeat("w2", {crash});
  EXPECT_EQ(coordinator_->GetJob(job_id)->generation(), 2);
  EXPECT_EQ(Stored().jobs.at(job_id).restarts_used, 1);
}

TEST_F(CoordinatorTest, CheckpointsCarryTheSamplerPosition) {
  const std::string job_id = StartTwoWorkerJob();
  auto request = Checkpoint(job_id, 50);
  request.set_samples_in_epoch(800);
  ASSERT_TRUE(coordinator_->CommitCheckpoint(request).ok());
  EXPECT_EQ(coordinator_->ListCheckpoints(job_id)->at(0).samples_in_epoch(), 800);
  EXPECT_EQ(Stored().checkpoints.at(job_id).at(0).samples_in_epoch(), 800);
  request.set_samples_in_epoch(-1);
  EXPECT_EQ(coordinator_->CommitCheckpoint(request).status().code(), absl::StatusCode::kInvalidArgument);
}

// Priorities through the coordinator: a high-priority job shrinks a running
// low one (its heartbeat responses name the release), starts on the released
// workers, and the low job grows back once the high one is done.
TEST_F(CoordinatorTest, HighPriorityJobShrinksALowOneWhichGrowsBackAfterIt) {
  for (const char* id : {"w1", "w2", "w3"}) Register(id);
  auto low = coordinator_->SubmitJob(Spec(1, 3));
  ASSERT_TRUE(low.ok()) << low.status();
  coordinator_->Tick();
  ASSERT_EQ(coordinator_->GetJob(low->id())->world_size(), 3);
  v1::JobSpec high_spec = Spec(2, 2);
  high_spec.set_priority(10);
  auto high = coordinator_->SubmitJob(high_spec);
  ASSERT_TRUE(high.ok()) << high.status();
  coordinator_->Tick();
  EXPECT_EQ(coordinator_->GetJob(high->id())->state(), v1::PENDING);
  EXPECT_EQ(MetricValue(registry_, "herd_coordinator_preemptions_total", {{"kind", "shrink"}}), 1);
  // Every member hears the whole set: ranks 1 and 2 (w2, w3) leave.
  for (const char* id : {"w1", "w2", "w3"}) {
    const v1::HeartbeatResponse response = Heartbeat(id);
    ASSERT_EQ(response.leavers_size(), 1) << id;
    EXPECT_EQ(response.leavers(0).job_id(), low->id());
    EXPECT_EQ(response.leavers(0).generation(), 1);
    EXPECT_THAT(response.leavers(0).ranks(), ::testing::ElementsAre(1, 2)) << id;
  }
  // Both leave at the same boundary.
  v1::TrainerExit released;
  released.set_job_id(low->id());
  released.set_generation(1);
  released.set_exit_code(v1::TRAINER_EXIT_RELEASED);
  Heartbeat("w3", {released});
  Heartbeat("w2", {released});
  coordinator_->Tick();
  auto high_job = coordinator_->GetJob(high->id());
  ASSERT_EQ(high_job->state(), v1::RUNNING);
  EXPECT_THAT(std::vector<std::string>(high_job->workers().begin(), high_job->workers().end()),
              ::testing::ElementsAre("w2", "w3"));
  auto low_job = coordinator_->GetJob(low->id());
  EXPECT_EQ(low_job->state(), v1::RUNNING);
  EXPECT_EQ(low_job->world_size(), 1);
  const int64_t shrunk_generation = low_job->generation();

  v1::TrainerExit done;
  done.set_job_id(high->id());
  done.set_generation(high_job->generation());
  done.set_exit_code(0);
  Heartbeat("w2", {done});
  Heartbeat("w3", {done});
  EXPECT_EQ(coordinator_->GetJob(high->id())->state(), v1::SUCCEEDED);
  clock_.Advance(11);  // past the join rate limit (one lease)
  for (const char* id : {"w1", "w2", "w3"}) Heartbeat(id, {}, {});
  coordinator_->Tick();
  // Growing back waits for the low job's next step boundary: its rank is
  // asked to re-form, and its join at that boundary starts the generation.
  EXPECT_EQ(coordinator_->GetJob(low->id())->generation(), shrunk_generation);
  const v1::HeartbeatResponse asked = Heartbeat("w1");
  ASSERT_EQ(asked.reform_jobs_size(), 1);
  EXPECT_EQ(asked.reform_jobs(0).job_id(), low->id());
  EXPECT_EQ(asked.reform_jobs(0).generation(), shrunk_generation);
  v1::JoinGenerationRequest join;
  join.set_job_id(low->id());
  join.set_worker_id("w1");
  join.set_after_generation(shrunk_generation);
  join.set_at_boundary(true);
  join.set_wait_ms(1000);
  auto joined = coordinator_->JoinGeneration(join, nullptr);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->world_size(), 3);
  EXPECT_EQ(joined->rank(), 0);
  low_job = coordinator_->GetJob(low->id());
  EXPECT_EQ(low_job->world_size(), 3);
  EXPECT_GT(low_job->generation(), shrunk_generation);
}

}  // namespace
}  // namespace herd::coordinator
