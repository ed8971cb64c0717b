#include "coordinator/cluster_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "coordinator/generations.h"
#include "coordinator/release.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr double kLease = 10;
constexpr double kMinWorkersWait = 60;

v1::JobSpec Spec(int64_t min_workers, int64_t max_workers, v1::Device device = v1::DEVICE_CPU) {
  v1::JobSpec spec;
  spec.set_min_workers(min_workers);
  spec.set_max_workers(max_workers);
  spec.set_device(device);
  spec.mutable_checkpoint()->set_keep(2);
  spec.set_restart_budget(3);  // the default ApplyJobDefaults gives
  return spec;
}

class ClusterStateTest : public ::testing::Test {
 protected:
  void AddWorker(const std::string& id, const std::string& device = "cpu") {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_address(id + ".local");
    request.set_device_kind(device);
    request.set_device_count(1);
    UpsertWorker(state_, request, clock_.Now());
  }
  void Submit(const std::string& id, const v1::JobSpec& spec) {
    ChangeSet changes;
    AddPendingJob(state_, id, spec, clock_.Now(), &changes);
  }
  const JobRecord& Job(const std::string& id) { return state_.jobs.at(id); }
  const WorkerRecord& Worker(const std::string& id) { return state_.workers.at(id); }
  v1::TrainerExit Exit(const std::string& job_id, int64_t generation, int code, const std::string& message = "") {
    v1::TrainerExit exit;
    exit.set_job_id(job_id);
    exit.set_generation(generation);
    exit.set_exit_code(code);
    exit.set_message(message);
    return exit;
  }
  // Two workers running job "j" as generation 1.
  void StartTwoWorkerJob() {
    AddWorker("w1");
    AddWorker("w2");
    Submit("j", Spec(2, 2));
    Schedule(state_, clock_.Now());
    ASSERT_EQ(Job("j").info.state(), v1::RUNNING);
  }
  // Workers w1..wN running job "j" (min_workers..N workers) as generation 1.
  void StartJob(int workers, int64_t min_workers, int64_t restart_budget = 3) {
    for (int i = 1; i <= workers; ++i) AddWorker("w" + std::to_string(i));
    v1::JobSpec spec = Spec(min_workers, workers);
    spec.set_restart_budget(restart_budget);
    Submit("j", spec);
    Schedule(state_, clock_.Now());
    ASSERT_EQ(Job("j").info.state(), v1::RUNNING);
    ASSERT_EQ(Job("j").generation.members.size(), static_cast<size_t>(workers));
  }
  // Everyone but `silent` heartbeats now.
  void AllBeatExcept(const std::set<std::string>& silent) {
    for (auto& [id, worker] : state_.workers) {
      if (!silent.count(id)) worker.last_heartbeat = clock_.Now();
    }
  }
  // The coordinator hears neither w1 nor w2 for longer than a lease (cut
  // off from both): both leases lapse, and upkeep runs.
  void LapseBothLeases() {
    clock_.Advance(kLease + 1);
    AllBeatExcept({"w1", "w2"});
    ExpireLeases(state_, clock_.Now(), kLease);
    Advance();
  }
  // Rank 0 of the current generation commits (reports progress).
  void Commit(int64_t step, int64_t epoch, int64_t samples_in_epoch) {
    v1::ReportProgressRequest report;
    report.set_job_id("j");
    report.set_generation(Job("j").generation.number);
    report.set_rank(0);
    report.set_step(step);
    report.set_epoch(epoch);
    report.set_samples_in_epoch(samples_in_epoch);
    ChangeSet changes;
    ASSERT_FALSE(ApplyProgress(state_, report, clock_.Now(), &changes));
  }
  absl::StatusOr<ChangeSet> ReportFailure(const std::string& worker_id, int64_t generation, int64_t rank,
                                          const std::string& message = "allreduce timed out") {
    v1::ReportFailureRequest report;
    report.set_job_id("j");
    report.set_generation(generation);
    report.set_rank(rank);
    report.set_worker_id(worker_id);
    report.set_message(message);
    return ApplyFailureReport(state_, report, clock_.Now());
  }
  ChangeSet Advance() {
    GenerationOptions options;
    options.lease_seconds = kLease;
    options.min_workers_wait_seconds = kMinWorkersWait;
    return AdvanceGenerations(state_, clock_.Now(), options);
  }
  // Upkeep asks a job below max_workers to re-form at its next step
  // boundary (nothing is fenced), and its ranks' at_boundary join does it.
  ChangeSet AdvanceAndReformAtBoundary(const std::string& job_id) {
    ChangeSet changes = Advance();
    EXPECT_TRUE(changes.generations_started.empty()) << "growing fenced the running generation";
    const JobRecord& job = Job(job_id);
    const std::string& rank0 = job.generation.members.at(0);
    const auto asked = ReformJobsFor(state_, rank0);
    EXPECT_EQ(asked.size(), 1u);
    if (asked.empty()) return changes;
    EXPECT_EQ(asked[0].generation(), job.generation.number);
    auto reformed = ReformAtBoundary(state_, job_id, rank0, asked[0].generation(), clock_.Now());
    EXPECT_TRUE(reformed.ok()) << reformed.status();
    if (reformed.ok()) changes.Merge(*reformed);
    return changes;
  }
  ChangeSet Heartbeat(const std::string& id, const std::vector<std::string>& running_jobs) {
    v1::HeartbeatRequest request;
    request.set_worker_id(id);
    for (const auto& job : running_jobs) request.add_running_jobs(job);
    return ApplyHeartbeat(state_, request, clock_.Now());
  }
  static std::vector<std::string> Reasons(const ChangeSet& changes) {
    std::vector<std::string> reasons;
    for (const auto& started : changes.generations_started) {
      reasons.emplace_back(GenerationStartReasonName(started.reason));
    }
    return reasons;
  }

  FakeClock clock_;
  ClusterState state_;
};

// A heartbeat that changes nothing but the lease renews it without the
// state lock held exclusively; anything else it says must go through
// ApplyHeartbeat.
TEST_F(ClusterStateTest, OnlyAHeartbeatThatChangesNothingButTheLeaseRenewsItAlone) {
  StartTwoWorkerJob();
  v1::HeartbeatRequest beat;
  beat.set_worker_id("w1");
  beat.add_running_jobs("j");
  EXPECT_FALSE(OnlyRenewsLease(state_, beat)) << "not heard since this coordinator started";
  ApplyHeartbeat(state_, beat, clock_.Now());
  EXPECT_TRUE(OnlyRenewsLease(state_, beat));

  v1::HeartbeatRequest other_jobs = beat;
  other_jobs.clear_running_jobs();
  EXPECT_FALSE(OnlyRenewsLease(state_, other_jobs)) << "its trainer stopped";
  other_jobs.add_running_jobs("j");
  other_jobs.add_running_jobs("j");
  EXPECT_FALSE(OnlyRenewsLease(state_, other_jobs)) << "a repeated job is not the same set";
  v1::HeartbeatRequest with_exit = beat;
  *with_exit.add_exits() = Exit("j", 1, 0);
  EXPECT_FALSE(OnlyRenewsLease(state_, with_exit));
  v1::HeartbeatRequest draining = beat;
  draining.set_draining(true);
  EXPECT_FALSE(OnlyRenewsLease(state_, draining));
  v1::HeartbeatRequest unknown = beat;
  unknown.set_worker_id("w9");
  EXPECT_FALSE(OnlyRenewsLease(state_, unknown));

  // A job waits for w1's hung trainer, which w1 no longer runs: the
  // heartbeat that says so frees it.
  state_.jobs.at("j").unresponsive["w1"].set_worker_id("w1");
  v1::HeartbeatRequest stopped = beat;
  stopped.clear_running_jobs();
  ApplyHeartbeat(state_, stopped, clock_.Now());
  state_.jobs.at("j").unresponsive["w1"].set_worker_id("w1");
  EXPECT_FALSE(OnlyRenewsLease(state_, stopped));

  state_.workers.at("w2").state = v1::DEAD;
  v1::HeartbeatRequest dead = beat;
  dead.set_worker_id("w2");
  EXPECT_FALSE(OnlyRenewsLease(state_, dead));
}

TEST_F(ClusterStateTest, LeaseRenewalsSetTheLastHeartbeatOfLiveWorkersOnly) {
  AddWorker("w1");
  AddWorker("w2");
  state_.workers.at("w2").state = v1::DEAD;
  const double w2_before = Worker("w2").last_heartbeat;
  ApplyLeaseRenewals(state_, {{"w1", clock_.Now() + 7}, {"w2", clock_.Now() + 7}, {"w9", clock_.Now() + 7}});
  EXPECT_DOUBLE_EQ(Worker("w1").last_heartbeat, clock_.Now() + 7);
  EXPECT_DOUBLE_EQ(Worker("w2").last_heartbeat, w2_before);
  EXPECT_FALSE(state_.workers.count("w9"));
}

TEST_F(ClusterStateTest, JobWaitsForMinWorkersThenStartsGenerationOne) {
  AddWorker("w1");
  Submit("j", Spec(2, 4));
  EXPECT_TRUE(Schedule(state_, clock_.Now()).empty());
  EXPECT_EQ(Job("j").info.state(), v1::PENDING);
  EXPECT_EQ(Worker("w1").state, v1::IDLE);

  AddWorker("w2");
  ChangeSet changes = Schedule(state_, clock_.Now());
  const JobRecord& job = Job("j");
  EXPECT_EQ(job.info.state(), v1::RUNNING);
  EXPECT_EQ(job.generation.number, 1);
  EXPECT_THAT(job.generation.members, ElementsAre("w1", "w2"));
  EXPECT_THAT(job.info.workers(), ElementsAre("w1", "w2"));
  EXPECT_EQ(job.info.world_size(), 2);
  EXPECT_EQ(job.info.generation(), 1);
  EXPECT_EQ(Worker("w1").state, v1::BUSY);
  EXPECT_EQ(Worker("w2").job_id, "j");
  ASSERT_EQ(changes.generations_started.size(), 1u);
  EXPECT_EQ(changes.generations_started[0].job_id, "j");
  EXPECT_EQ(changes.generations_started[0].number, 1);
  EXPECT_EQ(changes.jobs.count("j"), 1u);
  // Who is busy with the job is the job's record: no worker record to save.
  EXPECT_THAT(changes.workers, IsEmpty());
}

// What a store keeps of a worker is its registration and whether it is
// dead; which job it is busy with comes back from the jobs' generations.
TEST_F(ClusterStateTest, BusyWorkersAreSetAgainFromTheRunningJobsMembers) {
  StartJob(3, 2);
  AddWorker("w4");
  AddWorker("w5");
  Submit("done", Spec(1, 1));
  state_.jobs.at("done").info.set_state(v1::SUCCEEDED);
  state_.jobs.at("done").generation.members = {"w4"};
  ClusterState loaded = state_;
  for (auto& [id, worker] : loaded.workers) {
    worker.state = id == "w5" ? v1::DEAD : v1::IDLE;  // as a store keeps them
    worker.job_id.clear();
  }
  AssignMembersOfRunningJobs(loaded);
  for (const char* member : {"w1", "w2", "w3"}) {
    EXPECT_EQ(loaded.workers.at(member).state, v1::BUSY) << member;
    EXPECT_EQ(loaded.workers.at(member).job_id, "j") << member;
  }
  EXPECT_EQ(loaded.workers.at("w4").state, v1::IDLE);  // its job is over
  EXPECT_EQ(loaded.workers.at("w4").job_id, "");
  EXPECT_EQ(loaded.workers.at("w5").state, v1::DEAD);

  // A generation still waiting to form: its members are the survivors, busy.
  JobRecord& job = loaded.jobs.at("j");
  job.generation.formed = false;
  job.generation.members = {"w2"};
  AssignMembersOfRunningJobs(loaded);
  EXPECT_EQ(loaded.workers.at("w1").state, v1::IDLE);
  EXPECT_EQ(loaded.workers.at("w2").state, v1::BUSY);
  EXPECT_EQ(loaded.workers.at("w2").job_id, "j");
}

TEST_F(ClusterStateTest, TakesAtMostMaxWorkersLowestIdsFirst) {
  for (const char* id : {"w3", "w1", "w4", "w2"}) AddWorker(id);
  Submit("j", Spec(1, 3));
  Schedule(state_, clock_.Now());
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "w2", "w3"));
  EXPECT_EQ(Worker("w4").state, v1::IDLE);
  EXPECT_EQ(Job("j").generation.RankOf("w3"), 2);
  EXPECT_EQ(Job("j").generation.RankOf("w4"), -1);
}

TEST_F(ClusterStateTest, MatchesDeviceKind) {
  AddWorker("cpu1");
  Submit("gpu-job", Spec(1, 2, v1::DEVICE_CUDA));
  Schedule(state_, clock_.Now());
  EXPECT_EQ(Job("gpu-job").info.state(), v1::PENDING);

  AddWorker("gpu1", "cuda");
  Schedule(state_, clock_.Now());
  EXPECT_THAT(Job("gpu-job").generation.members, ElementsAre("gpu1"));
  EXPECT_EQ(Worker("cpu1").state, v1::IDLE);
}

TEST_F(ClusterStateTest, FirstInFirstOutWithBackfill) {
  AddWorker("w1");
  AddWorker("w2");
  // Submit order, not id order, decides who goes first.
  Submit("job-z", Spec(2, 2));
  Submit("job-a", Spec(1, 1));
  Schedule(state_, clock_.Now());
  EXPECT_EQ(Job("job-z").info.state(), v1::RUNNING);
  EXPECT_EQ(Job("job-a").info.state(), v1::PENDING);

  // A job too big for the free workers is skipped; a later one that fits starts.
  ASSERT_TRUE(CancelJob(state_, "job-z", clock_.Now()).ok());
  Submit("big", Spec(3, 3));
  Submit("small", Spec(1, 1));
  Schedule(state_, clock_.Now());
  EXPECT_EQ(Job("job-a").info.state(), v1::RUNNING);
  EXPECT_THAT(Job("job-a").generation.members, ElementsAre("w1"));
  EXPECT_EQ(Job("big").info.state(), v1::PENDING);
  EXPECT_EQ(Job("small").info.state(), v1::RUNNING);
  EXPECT_THAT(Job("small").generation.members, ElementsAre("w2"));
}

// Before generations, losing a member failed the job; now the survivor waits
// (below min_workers) for a replacement, keeping its trainer assigned.
TEST_F(ClusterStateTest, LeaseExpiryBelowMinWorkersKeepsTheSurvivorWaiting) {
  StartTwoWorkerJob();
  clock_.Advance(kLease);
  state_.workers.at("w1").last_heartbeat = clock_.Now();
  // Exactly one lease old is still alive.
  EXPECT_TRUE(ExpireLeases(state_, clock_.Now(), kLease).empty());

  clock_.Advance(0.5);
  ChangeSet changes = ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_EQ(Worker("w2").state, v1::DEAD);
  EXPECT_EQ(Worker("w2").job_id, "");
  const JobRecord& job = Job("j");
  EXPECT_EQ(job.info.state(), v1::RUNNING);
  EXPECT_EQ(job.info.reason(), "waiting for workers: have 1, need 2");
  EXPECT_EQ(job.generation.number, 2);
  EXPECT_FALSE(job.generation.formed);
  EXPECT_THAT(job.generation.members, ElementsAre("w1"));
  EXPECT_THAT(job.info.workers(), ElementsAre("w1"));
  EXPECT_EQ(job.last_failure, "worker w2 (rank 1) lost: lease expired");
  EXPECT_EQ(Worker("w1").state, v1::BUSY);
  EXPECT_TRUE(changes.generations_started.empty());  // counted once it forms
  EXPECT_EQ(changes.jobs.count("j"), 1u);
  ASSERT_THAT(AssignmentsFor(state_, "w1"), SizeIs(1));
  EXPECT_EQ(AssignmentsFor(state_, "w1")[0].generation(), 2);
  // Nobody can use the unformed generation, nor the old one.
  EXPECT_EQ(CheckCurrentGeneration(state_, "j", 2).message(),
            "job j: generation 2 has not formed yet (waiting for workers)");
  EXPECT_EQ(CheckCurrentGeneration(state_, "j", 1).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ClusterStateTest, IdleWorkerExpiresWithoutTouchingJobs) {
  AddWorker("w1");
  clock_.Advance(kLease + 1);
  ChangeSet changes = ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_EQ(Worker("w1").state, v1::DEAD);
  EXPECT_TRUE(changes.jobs.empty());
  // A dead worker is never scheduled.
  Submit("j", Spec(1, 1));
  Schedule(state_, clock_.Now());
  EXPECT_EQ(Job("j").info.state(), v1::PENDING);
}

TEST_F(ClusterStateTest, CleanExitsSucceedOnceEveryMemberFinished) {
  StartTwoWorkerJob();
  ASSERT_THAT(AssignmentsFor(state_, "w1"), ::testing::SizeIs(1));
  int64_t version = Job("j").version;

  ApplyTrainerExit(state_, "w1", Exit("j", 1, 0), clock_.Now());
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);
  EXPECT_GT(Job("j").version, version);
  EXPECT_THAT(AssignmentsFor(state_, "w1"), IsEmpty());
  ASSERT_THAT(AssignmentsFor(state_, "w2"), ::testing::SizeIs(1));
  EXPECT_EQ(AssignmentsFor(state_, "w2")[0].rank(), 1);

  ApplyTrainerExit(state_, "w2", Exit("j", 1, 0), clock_.Now());
  EXPECT_EQ(Job("j").info.state(), v1::SUCCEEDED);
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_EQ(Worker("w2").state, v1::IDLE);
}

// Before generations a non-zero exit failed the job; now it is a member
// failure: the next generation goes on without that member.
TEST_F(ClusterStateTest, NonZeroExitStartsGenerationWithoutTheMember) {
  StartJob(3, 1);
  Commit(10, 0, 480);
  ChangeSet changes = ApplyTrainerExit(state_, "w2", Exit("j", 1, 1, "CUDA out of memory"), clock_.Now());
  const JobRecord& job = Job("j");
  EXPECT_EQ(job.info.state(), v1::RUNNING);
  EXPECT_EQ(job.generation.number, 2);
  EXPECT_TRUE(job.generation.formed);
  // The failed worker is free, but not taken straight back.
  EXPECT_THAT(job.generation.members, ElementsAre("w1", "w3"));
  EXPECT_EQ(Worker("w2").state, v1::IDLE);
  EXPECT_EQ(job.generation.start_step, 10);
  EXPECT_EQ(job.restarts_used, 1);
  EXPECT_EQ(job.last_failure, "worker w2 (rank 1) trainer exited with code 1: CUDA out of memory");
  EXPECT_THAT(Reasons(changes), ElementsAre("member_lost"));

  // The same trainer's exit, or any, for generation 1 changes nothing now.
  EXPECT_TRUE(ApplyTrainerExit(state_, "w1", Exit("j", 1, 1), clock_.Now()).empty());
  EXPECT_EQ(Job("j").generation.number, 2);
  // Exit 0 of every member of the current generation still succeeds.
  ApplyTrainerExit(state_, "w1", Exit("j", 2, 0), clock_.Now());
  ApplyTrainerExit(state_, "w3", Exit("j", 2, 0), clock_.Now());
  EXPECT_EQ(Job("j").info.state(), v1::SUCCEEDED);
}

// A failure another generation would repeat (here: a checkpoint disk full
// under on_failure: fail) fails the job at once with the trainer's message,
// whichever generation it came from, and spends no restart budget.
TEST_F(ClusterStateTest, JobErrorExitFailsTheJobAtOnceNamingTheCause) {
  StartJob(3, 1);
  ApplyTrainerExit(state_, "w1", Exit("j", 1, v1::TRAINER_EXIT_JOB_ERROR,
                                      "checkpoint at step 100 failed: No space left on device"),
                   clock_.Now());
  const JobRecord& job = Job("j");
  EXPECT_EQ(job.info.state(), v1::FAILED);
  EXPECT_EQ(job.info.reason(), "worker w1 trainer failed: checkpoint at step 100 failed: No space left on device");
  EXPECT_EQ(job.restarts_used, 0);
  for (const char* id : {"w1", "w2", "w3"}) EXPECT_THAT(AssignmentsFor(state_, id), IsEmpty()) << id;
}

// A worker's exit report speaks only for jobs it holds: naming another job
// (a worker credential may only act for its own ids, not for other jobs)
// changes nothing.
TEST_F(ClusterStateTest, JobErrorExitFromAWorkerOutsideTheJobIsIgnored) {
  StartJob(2, 1);
  AddWorker("w3");
  ASSERT_EQ(Job("j").generation.RankOf("w3"), -1);
  ChangeSet changes = ApplyTrainerExit(state_, "w3", Exit("j", 1, v1::TRAINER_EXIT_JOB_ERROR, "forged"), clock_.Now());
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);
}

// The final report rides with a clean exit: a coordinator that missed the
// last progress reports (it was down) still records the true end.
TEST_F(ClusterStateTest, CleanExitCarriesTheFinalProgress) {
  StartTwoWorkerJob();
  Commit(130, 0, 4160);
  v1::TrainerExit exit = Exit("j", 1, 0);
  v1::ReportProgressRequest& last = *exit.mutable_final_progress();
  last.set_step(1250);
  last.set_epoch(1);
  last.set_total_steps(1250);
  last.set_loss(0.31);
  last.set_samples_per_second(1880);
  (*last.mutable_eval())["accuracy"] = 0.88;
  ApplyTrainerExit(state_, "w2", exit, clock_.Now());
  // An older report (a lagging rank) never moves the record back.
  v1::TrainerExit stale = Exit("j", 1, 0);
  stale.mutable_final_progress()->set_step(40);
  ApplyTrainerExit(state_, "w1", stale, clock_.Now());
  const JobRecord& job = Job("j");
  EXPECT_EQ(job.info.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.info.step(), 1250);
  EXPECT_EQ(job.info.epoch(), 1);
  EXPECT_DOUBLE_EQ(job.info.loss(), 0.31);
  EXPECT_DOUBLE_EQ(job.info.samples_per_second(), 1880);
  EXPECT_DOUBLE_EQ(job.info.eval().at("accuracy"), 0.88);
}

// After a pause of its own longer than a lease, the coordinator restarts
// every lease instead of declaring its workers dead.
TEST_F(ClusterStateTest, CoordinatorPauseGrantsGraceInsteadOfExpiringEveryone) {
  StartTwoWorkerJob();
  const double before = clock_.Now();
  clock_.Advance(3 * kLease);  // stopped: no upkeep, no heartbeats
  EXPECT_TRUE(GraceAfterPause(state_, before, clock_.Now(), kLease));
  EXPECT_TRUE(ExpireLeases(state_, clock_.Now(), kLease).empty());
  EXPECT_EQ(Job("j").generation.number, 1);
  EXPECT_EQ(Job("j").restarts_used, 0);
  // Ordinary upkeep gaps grant nothing, and silent workers still expire.
  EXPECT_FALSE(GraceAfterPause(state_, clock_.Now(), clock_.Now() + 0.2, kLease));
  clock_.Advance(kLease + 1);
  EXPECT_FALSE(ExpireLeases(state_, clock_.Now(), kLease).empty());
  EXPECT_EQ(Worker("w1").state, v1::DEAD);
}

// A worker left out of a generation while its trainer still holds the job
// context is held for that job: its trainer stays assigned, no other job
// takes it, and the job takes it back at its next join.
TEST_F(ClusterStateTest, WorkerLeftOutIsHeldAndReadmittedWithItsTrainer) {
  StartJob(3, 2);
  Commit(50, 0, 2400);
  clock_.Advance(kLease + 1);
  AllBeatExcept({"w3"});
  ExpireLeases(state_, clock_.Now(), kLease);
  ASSERT_EQ(Job("j").generation.number, 2);
  ASSERT_THAT(Job("j").generation.members, ElementsAre("w1", "w2"));
  // Another job waits for two workers meanwhile.
  AddWorker("w4");
  Submit("other", Spec(2, 2));

  // w3's daemon comes back: registers, and its heartbeat says its trainer runs j.
  AddWorker("w3");
  Heartbeat("w3", {"j"});
  EXPECT_EQ(HeldForJob(state_, Worker("w3")), "j");
  auto assignments = AssignmentsFor(state_, "w3");
  ASSERT_THAT(assignments, ::testing::SizeIs(1));
  EXPECT_EQ(assignments[0].job_id(), "j");
  Schedule(state_, clock_.Now());
  EXPECT_EQ(Job("other").info.state(), v1::PENDING) << "w3 is held for j, w4 alone is not enough";

  clock_.Advance(kLease + 1);  // joins are rate-limited to one per lease
  AllBeatExcept({});
  Heartbeat("w3", {"j"});
  ChangeSet changes = AdvanceAndReformAtBoundary("j");
  EXPECT_THAT(Reasons(changes), ElementsAre("join"));
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "w2", "w3"));
  EXPECT_EQ(Job("j").restarts_used, 1);  // only the lease expiry cost budget
  EXPECT_EQ(HeldForJob(state_, Worker("w3")), "");
}

// After a reported failure, a member that stays silent past one and a half
// heartbeat intervals (lease/10) is left out at once, without waiting out its
// lease, and without a second charge; live members are not touched.
TEST_F(ClusterStateTest, SilentMemberAfterAFailureIsLeftOutBeforeItsLeaseEnds) {
  StartJob(3, 2);
  Commit(30, 0, 1440);
  clock_.Advance(0.5);  // w3's machine died after its last heartbeat
  ASSERT_TRUE(ReportFailure("w1", 1, 0, "gloo: connection reset by peer").ok());
  ASSERT_EQ(Job("j").generation.number, 2);
  ASSERT_EQ(Job("j").generation.members.size(), 3u);
  clock_.Advance(0.5);
  AllBeatExcept({"w3"});
  EXPECT_TRUE(DropSilentMembersAfterFailure(state_, clock_.Now(), kLease).empty()) << "too early to tell";
  clock_.Advance(1.1);  // 1.6 s > 1.5 heartbeat intervals of 1 s
  AllBeatExcept({"w3"});
  ChangeSet changes = DropSilentMembersAfterFailure(state_, clock_.Now(), kLease);
  EXPECT_THAT(Reasons(changes), ElementsAre("member_lost"));
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "w2"));
  EXPECT_EQ(Job("j").restarts_used, 1) << "the failure was paid for once";
  EXPECT_EQ(Worker("w3").state, v1::DEAD);
  EXPECT_THAT(Job("j").last_failure, ::testing::HasSubstr("gloo: connection reset by peer"));
  // Once the new generation runs, nobody is dropped for silence any more.
  clock_.Advance(5);
  EXPECT_TRUE(DropSilentMembersAfterFailure(state_, clock_.Now(), kLease).empty());
}

// Every member lost at once (the coordinator was cut off from all of them)
// while their trainers kept the commit: when they come back held for the
// job, the new generation heals from their commit, so the job's committed
// step stays instead of falling back to the checkpoint (none: step 0).
TEST_F(ClusterStateTest, AllMembersLostAndHeldKeepTheCommittedStep) {
  StartTwoWorkerJob();
  Commit(630, 1, 320);
  LapseBothLeases();
  ASSERT_EQ(Job("j").info.state(), v1::RUNNING);
  ASSERT_TRUE(Job("j").generation.members.empty());
  EXPECT_EQ(Job("j").info.step(), 630);

  for (const std::string id : {"w1", "w2"}) {
    AddWorker(id);
    Heartbeat(id, {"j"});
    EXPECT_EQ(HeldForJob(state_, Worker(id)), "j");
  }
  clock_.Advance(kLease + 1);
  AllBeatExcept({});
  Advance();
  const JobRecord& job = Job("j");
  ASSERT_TRUE(job.generation.formed);
  EXPECT_THAT(job.generation.members, ElementsAre("w1", "w2"));
  EXPECT_EQ(job.info.step(), 630);
  EXPECT_EQ(job.info.epoch(), 1);
  EXPECT_EQ(job.info.samples_in_epoch(), 320);
  EXPECT_EQ(job.generation.start_step, 630);
}

// The coordinator was cut off from both members: their leases lapsed and
// their trainers finished training unheard. A member that registered again
// (IDLE, no longer in the waiting generation) still ends the job with its
// finishing exit for the generation it served: training is complete, and
// nothing may re-form the job from scratch.
TEST_F(ClusterStateTest, FinishingExitFromAMemberLetGoByItsLapsedLeaseEndsTheJob) {
  StartTwoWorkerJob();
  Commit(40, 0, 1280);
  LapseBothLeases();
  ASSERT_EQ(Job("j").info.state(), v1::RUNNING);
  ASSERT_TRUE(Job("j").generation.members.empty());
  ASSERT_EQ(Job("j").generation.number, 2);

  AddWorker("w1");
  Heartbeat("w1", {});
  ASSERT_EQ(Worker("w1").job_id, "");
  v1::TrainerExit exit = Exit("j", 1, 0);
  exit.mutable_final_progress()->set_step(1500);
  exit.mutable_final_progress()->set_total_steps(1500);
  exit.mutable_final_progress()->set_epoch(2);
  v1::HeartbeatRequest beat;
  beat.set_worker_id("w1");
  *beat.add_exits() = exit;
  ApplyHeartbeat(state_, beat, clock_.Now());
  EXPECT_EQ(Job("j").info.state(), v1::SUCCEEDED);
  EXPECT_EQ(Job("j").info.step(), 1500);
}

// Only a generation the worker served in counts: a worker that was never a
// member, or names a generation it did not serve, cannot end the job.
TEST_F(ClusterStateTest, FinishingExitForAGenerationTheWorkerDidNotServeIsIgnored) {
  AddWorker("w3");
  StartTwoWorkerJob();
  v1::TrainerExit exit = Exit("j", 1, 0);
  exit.mutable_final_progress()->set_step(1500);
  EXPECT_TRUE(ApplyTrainerExit(state_, "w3", exit, clock_.Now()).empty());
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);

  LapseBothLeases();
  ASSERT_EQ(Job("j").generation.number, 2);
  AddWorker("w1");
  Heartbeat("w1", {});
  EXPECT_TRUE(ApplyTrainerExit(state_, "w1", Exit("j", 2, 0), clock_.Now()).empty());
  v1::TrainerExit later = Exit("j", 2, 0);
  later.mutable_final_progress()->set_step(1500);
  ApplyTrainerExit(state_, "w1", later, clock_.Now());
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);
}

// The reason names the first failure of a streak, not the echoes after it.
TEST_F(ClusterStateTest, ExhaustedBudgetReasonNamesTheFirstFailure) {
  StartJob(2, 1, /*restart_budget=*/1);
  ASSERT_TRUE(ReportFailure("w2", 1, 1, "No space left on device").ok());
  ASSERT_EQ(Job("j").generation.number, 2);
  ASSERT_TRUE(ReportFailure("w1", 2, 0, "rank 0 left the collective").ok());
  EXPECT_EQ(Job("j").info.state(), v1::FAILED);
  EXPECT_THAT(Job("j").info.reason(), ::testing::HasSubstr("first failure: worker w2 (rank 1) reported a failure: "
                                                           "No space left on device"));
  EXPECT_THAT(Job("j").info.reason(), ::testing::HasSubstr("last failure: worker w1"));
}

TEST_F(ClusterStateTest, StaleGenerationAndFinalJobExitsAreIgnored) {
  StartTwoWorkerJob();
  int64_t version = Job("j").version;
  EXPECT_TRUE(ApplyTrainerExit(state_, "w1", Exit("j", 7, 1), clock_.Now()).empty());
  EXPECT_TRUE(ApplyTrainerExit(state_, "w1", Exit("unknown", 1, 1), clock_.Now()).empty());
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);
  EXPECT_EQ(Job("j").version, version);

  ASSERT_TRUE(CancelJob(state_, "j", clock_.Now()).ok());
  EXPECT_TRUE(ApplyTrainerExit(state_, "w1", Exit("j", 1, -9), clock_.Now()).empty());
  EXPECT_EQ(Job("j").info.state(), v1::CANCELLED);
  EXPECT_EQ(Job("j").info.reason(), "cancelled by user");
}

TEST_F(ClusterStateTest, CancelPendingRunningFinalAndUnknown) {
  Submit("pending", Spec(1, 1));
  ASSERT_TRUE(CancelJob(state_, "pending", clock_.Now()).ok());
  EXPECT_EQ(Job("pending").info.state(), v1::CANCELLED);

  StartTwoWorkerJob();
  auto changes = CancelJob(state_, "j", clock_.Now());
  ASSERT_TRUE(changes.ok());
  EXPECT_EQ(Job("j").info.state(), v1::CANCELLED);
  EXPECT_EQ(Job("j").info.reason(), "cancelled by user");
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_EQ(Worker("w2").state, v1::IDLE);

  auto again = CancelJob(state_, "j", clock_.Now());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()), ::testing::HasSubstr("CANCELLED"));
  EXPECT_EQ(CancelJob(state_, "nope", clock_.Now()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClusterStateTest, ReRegisteredMemberStaysBusy) {
  StartTwoWorkerJob();
  v1::RegisterWorkerRequest request;
  request.set_worker_id("w1");
  request.set_address("new-address");
  request.set_device_kind("cpu");
  UpsertWorker(state_, request, clock_.Now());
  EXPECT_EQ(Worker("w1").state, v1::BUSY);
  EXPECT_EQ(Worker("w1").address, "new-address");
  ASSERT_THAT(AssignmentsFor(state_, "w1"), ::testing::SizeIs(1));
  EXPECT_EQ(AssignmentsFor(state_, "w1")[0].generation(), 1);
}

// A daemon that restarts (a new incarnation) lost its trainer with the old
// process: it leaves the generation at once instead of re-registering BUSY
// into it, where its new trainer would rendezvous with the dead one's
// address. When every member restarts, one after the other, the job pays
// once and resumes from its checkpoint: none of the survivors kept along
// the way holds a commit.
TEST_F(ClusterStateTest, RestartedDaemonsLeaveTheirGenerationAtOnce) {
  auto register_as = [&](const std::string& id, const std::string& incarnation) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_address(id + ".local");
    request.set_device_kind("cpu");
    request.set_device_count(1);
    return ApplyRegistration(state_, request, incarnation, clock_.Now());
  };
  register_as("w1", "a1");
  register_as("w2", "b1");
  Submit("j", Spec(2, 2));
  Schedule(state_, clock_.Now());
  ASSERT_EQ(Job("j").generation.number, 1);
  v1::CheckpointInfo checkpoint;
  checkpoint.set_job_id("j");
  checkpoint.set_step(30);
  checkpoint.set_epoch(0);
  checkpoint.set_samples_in_epoch(960);
  checkpoint.set_path("j/step-30");
  RecordCheckpoint(state_, checkpoint, 2);
  Commit(40, 0, 1280);

  // The same process registering again (e.g. after its lease lapsed) keeps
  // its trainer and its place.
  EXPECT_TRUE(register_as("w1", "a1").generations_started.empty());
  EXPECT_EQ(Worker("w1").state, v1::BUSY);
  EXPECT_EQ(Job("j").generation.number, 1);

  ChangeSet first = register_as("w1", "a2");
  EXPECT_THAT(Reasons(first), ElementsAre("member_lost"));
  EXPECT_EQ(Job("j").generation.number, 2);
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w2", "w1")) << "the restarted worker rejoins at once";
  EXPECT_EQ(Job("j").generation.start_step, 40) << "w2 may still hold the commit";
  EXPECT_THAT(Job("j").last_failure, HasSubstr("daemon restarted"));
  EXPECT_EQ(Job("j").restarts_used, 1);

  ChangeSet second = register_as("w2", "b2");
  EXPECT_THAT(Reasons(second), ElementsAre("member_lost"));
  const JobRecord& job = Job("j");
  EXPECT_EQ(job.generation.number, 3);
  EXPECT_THAT(job.generation.members, ElementsAre("w1", "w2"));
  EXPECT_EQ(job.restarts_used, 1) << "one whole-job restart is one failure";
  // w1's trainer is new and generation 2 never committed: nobody holds the
  // step-40 commit, so the ranks resume from the checkpoint.
  EXPECT_EQ(job.generation.start_step, 30);
  EXPECT_EQ(job.info.step(), 30);
  EXPECT_EQ(AssignmentsFor(state_, "w2").at(0).generation(), 3);

  // Once the job commits again, its members count as holders.
  Commit(50, 0, 1600);
  EXPECT_TRUE(job.without_commit.empty());
}

// A restarted daemon that was waiting as a survivor of an unformed
// generation is no survivor any more, and is free to be taken back.
TEST_F(ClusterStateTest, RestartedDaemonIsNoSurvivorOfAWaitingGeneration) {
  auto register_as = [&](const std::string& id, const std::string& incarnation) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_address(id + ".local");
    request.set_device_kind("cpu");
    return ApplyRegistration(state_, request, incarnation, clock_.Now());
  };
  register_as("w1", "a1");
  register_as("w2", "b1");
  Submit("j", Spec(2, 2));
  Schedule(state_, clock_.Now());
  Commit(40, 0, 1280);
  clock_.Advance(kLease + 1);
  AllBeatExcept({"w2"});
  ExpireLeases(state_, clock_.Now(), kLease);
  ASSERT_FALSE(Job("j").generation.formed);
  ASSERT_THAT(Job("j").generation.members, ElementsAre("w1"));
  register_as("w1", "a2");
  EXPECT_TRUE(Job("j").generation.members.empty());
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_EQ(Job("j").restarts_used, 1) << "waiting costs nothing more";
}

// The coordinator and a worker die together. The restarted coordinator
// grants every worker it loaded a long lease grace, but once the survivors
// report the failure, a member it has not heard at all within the
// reconnect window is left out: the survivors train on within seconds.
TEST_F(ClusterStateTest, MemberUnheardSinceACoordinatorRestartIsLeftOutAfterTheReconnectWindow) {
  StartJob(3, 2);
  Commit(30, 0, 1440);
  MarkRestarted(state_, clock_.Now());
  state_.serving_since = clock_.Now();
  for (auto& [id, worker] : state_.workers) worker.last_heartbeat = clock_.Now() + 15;  // StartServing's grace
  Heartbeat("w1", {"j"});
  Heartbeat("w2", {"j"});
  clock_.Advance(0.5);
  ASSERT_TRUE(ReportFailure("w1", 1, 0, "gloo: connection closed by peer").ok());
  ASSERT_EQ(Job("j").generation.number, 2);
  clock_.Advance(2);
  Heartbeat("w1", {"j"});
  Heartbeat("w2", {"j"});
  EXPECT_TRUE(DropSilentMembersAfterFailure(state_, clock_.Now(), kLease).empty())
      << "a live w3 may still be reconnecting";
  clock_.Advance(ReconnectWindow(kLease) - 2.5 + 0.1);
  Heartbeat("w1", {"j"});
  Heartbeat("w2", {"j"});
  ChangeSet changes = DropSilentMembersAfterFailure(state_, clock_.Now(), kLease);
  EXPECT_THAT(Reasons(changes), ElementsAre("member_lost"));
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "w2"));
  EXPECT_EQ(Job("j").restarts_used, 1);
  EXPECT_EQ(Job("j").generation.start_step, 30);
}

TEST_F(ClusterStateTest, FencingNamesCurrentGeneration) {
  StartTwoWorkerJob();
  EXPECT_TRUE(CheckCurrentGeneration(state_, "j", 1).ok());
  absl::Status stale = CheckCurrentGeneration(state_, "j", 2);
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(stale.message(), "job j: generation 2 is not current (current: 1)");
  EXPECT_EQ(CheckCurrentGeneration(state_, "x", 1).code(), absl::StatusCode::kNotFound);
}

// A progress report of job "j"'s first generation.
v1::ReportProgressRequest RankReport(int64_t rank, int64_t step) {
  v1::ReportProgressRequest report;
  report.set_job_id("j");
  report.set_generation(1);
  report.set_rank(rank);
  report.set_step(step);
  return report;
}

TEST_F(ClusterStateTest, ProgressFromRankZeroOnlyAndCancelledAnswer) {
  StartTwoWorkerJob();
  v1::ReportProgressRequest report = RankReport(1, 5);
  ChangeSet changes;
  EXPECT_FALSE(ApplyProgress(state_, report, clock_.Now(), &changes));
  EXPECT_EQ(Job("j").info.step(), 0);

  report.set_rank(0);
  report.set_loss(0.25);
  (*report.mutable_eval())["accuracy"] = 0.9;
  EXPECT_FALSE(ApplyProgress(state_, report, clock_.Now(), &changes));
  EXPECT_EQ(Job("j").info.step(), 5);
  EXPECT_DOUBLE_EQ(Job("j").info.loss(), 0.25);
  report.clear_eval();
  ApplyProgress(state_, report, clock_.Now(), &changes);
  EXPECT_DOUBLE_EQ(Job("j").info.eval().at("accuracy"), 0.9);

  ASSERT_TRUE(CancelJob(state_, "j", clock_.Now()).ok());
  report.set_step(6);
  EXPECT_TRUE(ApplyProgress(state_, report, clock_.Now(), &changes));
  EXPECT_EQ(Job("j").info.step(), 5);
}

// The newest report's straggler replaces the last, named by the member at
// its rank; a report without one (or naming no member) clears it.
TEST_F(ClusterStateTest, ProgressCarriesTheStragglerNamedByItsMember) {
  StartTwoWorkerJob();
  v1::ReportProgressRequest report = RankReport(0, 10);
  report.mutable_straggler()->set_rank(1);
  report.mutable_straggler()->set_holdback_fraction(0.4);
  ChangeSet changes;
  ApplyProgress(state_, report, clock_.Now(), &changes);
  ASSERT_TRUE(Job("j").info.has_straggler());
  EXPECT_EQ(Job("j").info.straggler().worker_id(), Job("j").generation.members.at(1));
  EXPECT_DOUBLE_EQ(Job("j").info.straggler().holdback_fraction(), 0.4);
  report.mutable_straggler()->set_rank(5);
  ApplyProgress(state_, report, clock_.Now(), &changes);
  EXPECT_FALSE(Job("j").info.has_straggler());
  report.mutable_straggler()->set_rank(0);
  ApplyProgress(state_, report, clock_.Now(), &changes);
  EXPECT_EQ(Job("j").info.straggler().worker_id(), Job("j").generation.members.at(0));
  report.clear_straggler();
  ApplyProgress(state_, report, clock_.Now(), &changes);
  EXPECT_FALSE(Job("j").info.has_straggler());
}

// The newest report's ranks replace the last, each named by its member; a
// report without them (or not listing every member) clears them.
TEST_F(ClusterStateTest, ProgressCarriesEveryRankNamedByItsMember) {
  StartTwoWorkerJob();
  v1::ReportProgressRequest report = RankReport(0, 10);
  for (int share : {90, 38}) {
    v1::RankInterval* rank = report.add_ranks();
    rank->set_samples_per_step(64);
    rank->set_batch_share(share);
  }
  ChangeSet changes;
  ApplyProgress(state_, report, clock_.Now(), &changes);
  ASSERT_EQ(Job("j").info.ranks_size(), 2);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(Job("j").info.ranks(rank).worker_id(), Job("j").generation.members.at(rank));
  }
  EXPECT_EQ(Job("j").info.ranks(1).batch_share(), 38);
  report.add_ranks();
  ApplyProgress(state_, report, clock_.Now(), &changes);
  EXPECT_EQ(Job("j").info.ranks_size(), 0);
  report.mutable_ranks()->RemoveLast();
  ApplyProgress(state_, report, clock_.Now(), &changes);
  EXPECT_EQ(Job("j").info.ranks_size(), 2);
  report.clear_ranks();
  ApplyProgress(state_, report, clock_.Now(), &changes);
  EXPECT_EQ(Job("j").info.ranks_size(), 0);
}

TEST_F(ClusterStateTest, CheckpointRetentionDropsOldest) {
  auto checkpoint = [](int step) {
    v1::CheckpointInfo info;
    info.set_job_id("j");
    info.set_step(step);
    info.set_path("ckpt/" + std::to_string(step));
    return info;
  };
  EXPECT_THAT(RecordCheckpoint(state_, checkpoint(10), 2), IsEmpty());
  EXPECT_THAT(RecordCheckpoint(state_, checkpoint(20), 2), IsEmpty());
  auto dropped = RecordCheckpoint(state_, checkpoint(30), 2);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].path(), "ckpt/10");
  ASSERT_EQ(state_.checkpoints.at("j").size(), 2u);
  EXPECT_EQ(state_.checkpoints.at("j").back().step(), 30);
}

// ---------------------------------------------------------------- generations

TEST_F(ClusterStateTest, LostMemberStartsGenerationWithSurvivorsInOrderFromCommittedState) {
  StartJob(3, 2);
  Commit(30, 1, 960);
  clock_.Advance(kLease + 1);
  AllBeatExcept({"w2"});
  ChangeSet changes = ExpireLeases(state_, clock_.Now(), kLease);

  const JobRecord& job = Job("j");
  EXPECT_EQ(job.info.state(), v1::RUNNING);
  EXPECT_EQ(job.info.reason(), "");
  EXPECT_EQ(job.generation.number, 2);
  EXPECT_TRUE(job.generation.formed);
  EXPECT_EQ(GenerationStartReasonName(job.generation.reason), "member_lost");
  EXPECT_THAT(job.generation.members, ElementsAre("w1", "w3"));
  EXPECT_THAT(job.info.workers(), ElementsAre("w1", "w3"));
  EXPECT_EQ(job.info.world_size(), 2);
  EXPECT_EQ(job.info.generation(), 2);
  // The committed state carries over and rank 0 (a survivor) heals the rest.
  EXPECT_EQ(job.generation.start_step, 30);
  EXPECT_EQ(job.info.epoch(), 1);
  EXPECT_EQ(job.info.samples_in_epoch(), 960);
  EXPECT_EQ(job.restarts_used, 1);
  ASSERT_EQ(changes.generations_started.size(), 1u);
  EXPECT_EQ(changes.generations_started[0].number, 2);
  EXPECT_EQ(GenerationStartReasonName(changes.generations_started[0].reason), "member_lost");
  EXPECT_EQ(Worker("w2").state, v1::DEAD);
  ASSERT_THAT(AssignmentsFor(state_, "w3"), SizeIs(1));
  EXPECT_EQ(AssignmentsFor(state_, "w3")[0].generation(), 2);
  EXPECT_EQ(AssignmentsFor(state_, "w3")[0].rank(), 1);
  // Generation 1 is fenced from now on.
  EXPECT_EQ(CheckCurrentGeneration(state_, "j", 1).message(), "job j: generation 1 is not current (current: 2)");
  EXPECT_TRUE(CheckCurrentGeneration(state_, "j", 2).ok());
}

TEST_F(ClusterStateTest, WorkersLostTogetherCostOneGeneration) {
  StartJob(4, 2);
  clock_.Advance(kLease + 1);
  AllBeatExcept({"w1", "w3"});
  ChangeSet changes = ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_THAT(Reasons(changes), ElementsAre("member_lost"));
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w2", "w4"));
  EXPECT_EQ(Job("j").generation.number, 2);
  EXPECT_EQ(Job("j").restarts_used, 1);
  EXPECT_EQ(Job("j").last_failure, "workers w1 (rank 0), w3 (rank 2) lost: lease expired");
}

TEST_F(ClusterStateTest, ReportedFailureStartsGenerationKeepingTheReporter) {
  StartJob(3, 3);
  Commit(20, 0, 960);
  auto changes = ReportFailure("w3", 1, 2);
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_THAT(Reasons(*changes), ElementsAre("failure_reported"));
  const JobRecord& job = Job("j");
  EXPECT_EQ(job.generation.number, 2);
  EXPECT_THAT(job.generation.members, ElementsAre("w1", "w2", "w3"));
  EXPECT_EQ(job.generation.start_step, 20);
  EXPECT_EQ(job.restarts_used, 1);
  EXPECT_EQ(job.last_failure, "worker w3 (rank 2) reported a failure: allreduce timed out");

  // The other ranks report the same failure for generation 1: fenced, no
  // further generation.
  auto late = ReportFailure("w1", 1, 0);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(late.status().message(), "job j: generation 1 is not current (current: 2)");
  EXPECT_EQ(Job("j").generation.number, 2);

  auto wrong_rank = ReportFailure("w1", 2, 1);
  EXPECT_EQ(wrong_rank.status().code(), absl::StatusCode::kInvalidArgument);
  AddWorker("stranger");
  EXPECT_EQ(ReportFailure("stranger", 2, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  v1::ReportFailureRequest unknown;
  unknown.set_job_id("nope");
  EXPECT_EQ(ApplyFailureReport(state_, unknown, clock_.Now()).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(CancelJob(state_, "j", clock_.Now()).ok());
  EXPECT_EQ(ReportFailure("w1", 2, 0).status().message(), "job j is CANCELLED");
}

v1::ReportFailureRequest Blaming(const std::string& reporter, int64_t rank, v1::PeerFaultKind kind, int64_t peer,
                                 int64_t step) {
  v1::ReportFailureRequest report;
  report.set_job_id("j");
  report.set_generation(1);
  report.set_rank(rank);
  report.set_worker_id(reporter);
  report.set_message("all-reduce failed");
  report.set_peer_fault(kind);
  report.set_peer_rank(peer);
  report.set_step(step);
  return report;
}

// A peer whose connection closed is left out of the next generation at
// once: the survivors need not wait for its lease.
TEST_F(ClusterStateTest, FailureBlamingAClosedPeerLeavesItOutAtOnce) {
  StartJob(3, 2);
  auto changes = ApplyFailureReport(state_, Blaming("w1", 0, v1::PEER_FAULT_CLOSED, 2, 17), clock_.Now());
  ASSERT_TRUE(changes.ok()) << changes.status();
  const JobRecord& job = Job("j");
  EXPECT_EQ(job.generation.number, 2);
  EXPECT_TRUE(job.generation.formed);
  EXPECT_THAT(job.generation.members, ElementsAre("w1", "w2"));
  EXPECT_EQ(job.restarts_used, 1);
  EXPECT_THAT(job.info.unresponsive(), IsEmpty()) << "a closed peer is not a hung one";
  EXPECT_EQ(Worker("w3").state, v1::IDLE);
  // A report that blames the reporter itself blames no one.
  v1::ReportFailureRequest self = Blaming("w2", 1, v1::PEER_FAULT_CLOSED, 1, 18);
  self.set_generation(2);
  ASSERT_TRUE(ApplyFailureReport(state_, self, clock_.Now()).ok());
  EXPECT_EQ(Job("j").generation.number, 3);
  EXPECT_EQ(Job("j").generation.RankOf("w2"), 1);
}

// A peer that did not answer in time is left out and joins no generation
// while its trainer stays silent, although its daemon heartbeats with the
// trainer still running; it is taken back once its trainer answers.
TEST_F(ClusterStateTest, LatePeerJoinsAgainOnlyOnceItsTrainerAnswers) {
  StartJob(3, 2);
  auto changes = ApplyFailureReport(state_, Blaming("w1", 0, v1::PEER_FAULT_LATE, 2, 17), clock_.Now());
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "w2"));
  ASSERT_THAT(Job("j").info.unresponsive(), SizeIs(1));
  EXPECT_EQ(Job("j").info.unresponsive(0).worker_id(), "w3");
  EXPECT_EQ(Job("j").info.unresponsive(0).rank(), 2);
  EXPECT_EQ(Job("j").info.unresponsive(0).generation(), 1);
  EXPECT_EQ(Job("j").info.unresponsive(0).step(), 17);
  // Its daemon heartbeats, its trainer still runs the job: held, not taken.
  for (int beat = 0; beat < 5; ++beat) {
    clock_.Advance(kLease);
    Heartbeat("w1", {"j"});
    Heartbeat("w2", {"j"});
    Heartbeat("w3", {"j"});
    Advance();
    EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "w2"));
    EXPECT_EQ(Job("j").reform_requested_generation, 0) << "nobody to grow with";
  }
  EXPECT_THAT(IdleWorkersFor(state_, "j", Job("j").info.spec()), IsEmpty());
  // It answers: the job grows back with it at its next boundary.
  EXPECT_FALSE(TrainerAnswered(state_, "j", "w3", clock_.Now()).empty());
  EXPECT_THAT(Job("j").info.unresponsive(), IsEmpty());
  AdvanceAndReformAtBoundary("j");
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "w2", "w3"));
}

TEST_F(ClusterStateTest, LatePeerWhoseTrainerEndedIsFreeAgain) {
  StartJob(3, 2);
  ASSERT_TRUE(ApplyFailureReport(state_, Blaming("w2", 1, v1::PEER_FAULT_LATE, 0, 5), clock_.Now()).ok());
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w2", "w3"));
  ASSERT_THAT(Job("j").info.unresponsive(), SizeIs(1));
  Heartbeat("w1", {});  // its daemon stopped the hung trainer
  EXPECT_THAT(Job("j").info.unresponsive(), IsEmpty());
  EXPECT_THAT(IdleWorkersFor(state_, "j", Job("j").info.spec()), ElementsAre("w1"));
}

// The job's own error (its model, its data) ends it at once, spending no
// budget, even after a peer's report of the collective it broke came first.
TEST_F(ClusterStateTest, JobErrorReportFailsTheJobAtOnceWhateverGenerationItNames) {
  StartJob(2, 2, /*restart_budget=*/5);
  v1::ReportFailureRequest error;
  error.set_job_id("j");
  error.set_generation(1);
  error.set_rank(1);
  error.set_worker_id("w2");
  error.set_message(
      "training step 1 (model torchscript): model returned logits of shape [8, 3]; the dataset has 10 classes");
  error.set_job_error(true);
  AddWorker("stranger");
  v1::ReportFailureRequest from_stranger = error;
  from_stranger.set_worker_id("stranger");
  EXPECT_EQ(ApplyFailureReport(state_, from_stranger, clock_.Now()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::ReportFailureRequest from_future = error;
  from_future.set_generation(7);
  EXPECT_EQ(ApplyFailureReport(state_, from_future, clock_.Now()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);

  ASSERT_TRUE(ReportFailure("w1", 1, 0, "rank 1 closed its connection").ok());  // the echo, first
  ASSERT_EQ(Job("j").generation.number, 2);
  auto changes = ApplyFailureReport(state_, error, clock_.Now());
  ASSERT_TRUE(changes.ok()) << changes.status();
  EXPECT_EQ(Job("j").info.state(), v1::FAILED);
  EXPECT_EQ(Job("j").info.reason(),
            "worker w2 (rank 1) trainer failed: training step 1 (model torchscript): model returned logits of shape "
            "[8, 3]; the dataset has 10 classes");
  EXPECT_EQ(Job("j").restarts_used, 1) << "only the echo was charged";
  EXPECT_EQ(ApplyFailureReport(state_, error, clock_.Now()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ClusterStateTest, LeaseExpiryConfirmingAnUncommittedReportedFailureIsNotChargedAgain) {
  StartJob(3, 1);
  // w3 hangs: the others' collective times out before its lease runs out.
  ASSERT_TRUE(ReportFailure("w1", 1, 0).ok());
  EXPECT_EQ(Job("j").restarts_used, 1);
  clock_.Advance(kLease + 1);
  AllBeatExcept({"w3"});
  ChangeSet changes = ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_THAT(Reasons(changes), ElementsAre("member_lost"));
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "w2"));
  EXPECT_EQ(Job("j").restarts_used, 1);

  // Once a generation has committed, the next loss is a new failure.
  Commit(10, 0, 320);
  clock_.Advance(kLease + 1);
  AllBeatExcept({"w2"});
  ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1"));
  EXPECT_EQ(Job("j").restarts_used, 2);
}

TEST_F(ClusterStateTest, IdleWorkersJoinBelowMaxLastAndRateLimited) {
  AddWorker("w1");
  v1::JobSpec spec = Spec(1, 3);
  Submit("j", spec);
  Schedule(state_, clock_.Now());
  Commit(5, 0, 40);
  // "a0" sorts before w1 but joins after it: joiners go last.
  AddWorker("a0");
  EXPECT_TRUE(Advance().empty());  // generation 1 has just started
  clock_.Advance(kLease);
  AllBeatExcept({});
  ChangeSet changes = AdvanceAndReformAtBoundary("j");
  EXPECT_THAT(Reasons(changes), ElementsAre("join"));
  const JobRecord& job = Job("j");
  EXPECT_EQ(job.generation.number, 2);
  EXPECT_THAT(job.generation.members, ElementsAre("w1", "a0"));
  EXPECT_EQ(job.generation.start_step, 5);
  EXPECT_EQ(job.restarts_used, 0);  // joins are free
  EXPECT_EQ(Worker("a0").state, v1::BUSY);

  // A second joiner right away waits a lease for the next join generation.
  AddWorker("b0");
  clock_.Advance(kLease / 2);
  AllBeatExcept({});
  EXPECT_TRUE(Advance().empty());
  EXPECT_EQ(Worker("b0").state, v1::IDLE);
  clock_.Advance(kLease / 2);
  AllBeatExcept({});
  EXPECT_THAT(Reasons(AdvanceAndReformAtBoundary("j")), ElementsAre("join"));
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "a0", "b0"));

  // At max_workers nobody else joins.
  AddWorker("c0");
  clock_.Advance(kLease * 3);
  AllBeatExcept({});
  EXPECT_TRUE(Advance().empty());
  EXPECT_EQ(Job("j").generation.number, 3);
}

TEST_F(ClusterStateTest, WorkersOfOtherDevicesDoNotJoin) {
  StartJob(1, 1);
  state_.jobs.at("j").info.mutable_spec()->set_max_workers(2);
  AddWorker("g1", "cuda");
  clock_.Advance(kLease);
  AllBeatExcept({});
  EXPECT_TRUE(Advance().empty());
}

TEST_F(ClusterStateTest, RestartBudgetExhaustedFailsTheJob) {
  StartJob(2, 1, /*restart_budget=*/1);
  ASSERT_TRUE(ReportFailure("w2", 1, 1, "gloo: connection reset").ok());
  EXPECT_EQ(Job("j").generation.number, 2);
  EXPECT_EQ(Job("j").restarts_used, 1);
  auto exhausted = ReportFailure("w1", 2, 0, "nccl watchdog timeout");
  ASSERT_TRUE(exhausted.ok()) << exhausted.status();
  EXPECT_TRUE(exhausted->generations_started.empty());
  EXPECT_EQ(Job("j").info.state(), v1::FAILED);
  EXPECT_EQ(Job("j").info.reason(),
            "restart budget (1) exhausted; first failure: worker w2 (rank 1) reported a failure: gloo: connection "
            "reset; last failure: worker w1 (rank 0) reported a failure: nccl watchdog timeout");
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_EQ(Worker("w2").state, v1::IDLE);
  EXPECT_THAT(AssignmentsFor(state_, "w1"), IsEmpty());
}

TEST_F(ClusterStateTest, BelowMinWorkersWaitsThenFailsAfterTheTimeout) {
  StartJob(2, 2);
  clock_.Advance(kLease + 1);
  AllBeatExcept({"w2"});
  ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_EQ(Job("j").info.reason(), "waiting for workers: have 1, need 2");
  const int64_t version = Job("j").version;

  clock_.Advance(kMinWorkersWait);
  AllBeatExcept({});
  EXPECT_TRUE(Advance().empty());  // exactly the timeout: still waiting
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);
  EXPECT_EQ(Job("j").version, version);

  clock_.Advance(0.5);
  AllBeatExcept({});
  ChangeSet changes = Advance();
  EXPECT_EQ(Job("j").info.state(), v1::FAILED);
  EXPECT_EQ(Job("j").info.reason(), "fewer than min_workers (2) workers for 60 seconds");
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_EQ(changes.jobs.count("j"), 1u);
}

TEST_F(ClusterStateTest, BelowMinWorkersFormsOnceAWorkerArrives) {
  StartJob(2, 2);
  Commit(8, 0, 128);
  clock_.Advance(kLease + 1);
  AllBeatExcept({"w1"});
  ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_EQ(Job("j").generation.number, 2);
  EXPECT_FALSE(Job("j").generation.formed);

  clock_.Advance(30);
  AllBeatExcept({});
  AddWorker("w0");
  ChangeSet changes = Advance();
  EXPECT_THAT(Reasons(changes), ElementsAre("member_lost"));
  const JobRecord& job = Job("j");
  EXPECT_TRUE(job.generation.formed);
  EXPECT_EQ(job.generation.number, 2);
  EXPECT_THAT(job.generation.members, ElementsAre("w2", "w0"));
  EXPECT_EQ(job.generation.start_step, 8);
  EXPECT_EQ(job.info.reason(), "");
  EXPECT_EQ(job.restarts_used, 1);
  EXPECT_TRUE(CheckCurrentGeneration(state_, "j", 2).ok());
}

TEST_F(ClusterStateTest, SurvivorWhoseTrainerEndsWhileWaitingIsNoSurvivor) {
  StartJob(2, 2);
  clock_.Advance(kLease + 1);
  AllBeatExcept({"w2"});
  ExpireLeases(state_, clock_.Now(), kLease);
  ChangeSet changes = ApplyTrainerExit(state_, "w1", Exit("j", 2, 1, "peer gone"), clock_.Now());
  EXPECT_THAT(Job("j").generation.members, IsEmpty());
  EXPECT_EQ(Job("j").info.reason(), "waiting for workers: have 0, need 2");
  EXPECT_EQ(Job("j").restarts_used, 1);  // no new generation: not charged again
  EXPECT_EQ(Worker("w1").state, v1::IDLE);
  EXPECT_TRUE(changes.generations_started.empty());
}

TEST_F(ClusterStateTest, NoSurvivorRestartsFromTheNewestCheckpointOnceWorkersExist) {
  StartJob(2, 2);
  v1::CheckpointInfo checkpoint;
  checkpoint.set_job_id("j");
  checkpoint.set_step(20);
  checkpoint.set_epoch(1);
  checkpoint.set_samples_in_epoch(640);
  checkpoint.set_path("j/step-20");
  RecordCheckpoint(state_, checkpoint, 2);
  Commit(30, 1, 960);

  clock_.Advance(kLease + 1);
  ChangeSet lost = ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_TRUE(lost.generations_started.empty());
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);
  EXPECT_EQ(Job("j").info.reason(), "waiting for workers: have 0, need 2");
  EXPECT_EQ(Job("j").restarts_used, 1);

  AddWorker("w3");
  EXPECT_TRUE(Advance().empty());  // one is not enough
  AddWorker("w4");
  ChangeSet changes = Advance();
  EXPECT_THAT(Reasons(changes), ElementsAre("member_lost"));
  const JobRecord& job = Job("j");
  EXPECT_THAT(job.generation.members, ElementsAre("w3", "w4"));
  EXPECT_EQ(job.generation.start_step, 20);
  EXPECT_EQ(job.info.epoch(), 1);
  // The job's committed state rolls back to the checkpoint it resumes from.
  EXPECT_EQ(job.info.step(), 20);
  EXPECT_EQ(job.info.samples_in_epoch(), 640);
  EXPECT_EQ(NewestCheckpoint(state_, "j")->path(), "j/step-20");
}

TEST_F(ClusterStateTest, NoSurvivorAndNoCheckpointStartsFromScratch) {
  StartJob(1, 1);
  Commit(30, 1, 960);
  ApplyTrainerExit(state_, "w1", Exit("j", 1, -9, "killed"), clock_.Now());
  // The crashed worker was not taken back at once...
  EXPECT_FALSE(Job("j").generation.formed);
  // ...but it is the only one there is on the next round.
  ChangeSet changes = Advance();
  EXPECT_THAT(Reasons(changes), ElementsAre("member_lost"));
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1"));
  EXPECT_EQ(Job("j").generation.start_step, 0);
  EXPECT_EQ(Job("j").info.step(), 0);
  EXPECT_EQ(Job("j").info.epoch(), 0);
}

TEST_F(ClusterStateTest, FirstGenerationStartsFromScratchWithNobodyToHealFrom) {
  StartTwoWorkerJob();
  EXPECT_EQ(GenerationStartReasonName(Job("j").generation.reason), "start");
  EXPECT_EQ(Job("j").generation.start_step, 0);
  EXPECT_TRUE(Job("j").generation.formed);
}

TEST_F(ClusterStateTest, RestartKeepsGenerationWhenEveryMemberStillRunsItsTrainer) {
  StartJob(2, 2);
  MarkRestarted(state_, clock_.Now());
  EXPECT_TRUE(Job("j").recovering);
  Heartbeat("w1", {"j"});
  EXPECT_TRUE(Advance().empty());  // w2 not heard yet
  EXPECT_TRUE(Job("j").recovering);
  Heartbeat("w2", {"j"});
  EXPECT_TRUE(Advance().empty());
  EXPECT_FALSE(Job("j").recovering);
  EXPECT_EQ(Job("j").generation.number, 1);
}

TEST_F(ClusterStateTest, RestartStartsNewGenerationWhenAMemberLostItsTrainer) {
  StartJob(3, 3);
  Commit(12, 0, 576);
  MarkRestarted(state_, clock_.Now());
  Heartbeat("w1", {});  // its daemon restarted too: no trainer
  Heartbeat("w2", {"j"});
  Heartbeat("w3", {"j"});
  ChangeSet changes = Advance();
  EXPECT_THAT(Reasons(changes), ElementsAre("coordinator_restart"));
  const JobRecord& job = Job("j");
  EXPECT_FALSE(job.recovering);
  EXPECT_EQ(job.generation.number, 2);
  // Trainers holding the state first; the one without rejoins last.
  EXPECT_THAT(job.generation.members, ElementsAre("w2", "w3", "w1"));
  EXPECT_EQ(job.generation.start_step, 12);
  EXPECT_EQ(job.restarts_used, 0);  // not a failure
}

TEST_F(ClusterStateTest, RestartedMemberThatNeverReturnsIsLostByLease) {
  StartJob(2, 1);
  MarkRestarted(state_, clock_.Now());
  Heartbeat("w1", {"j"});
  EXPECT_TRUE(Advance().empty());
  clock_.Advance(kLease + 1);
  Heartbeat("w1", {"j"});
  ChangeSet changes = ExpireLeases(state_, clock_.Now(), kLease);
  EXPECT_THAT(Reasons(changes), ElementsAre("member_lost"));
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1"));
  EXPECT_FALSE(Job("j").recovering);
}

TEST_F(ClusterStateTest, RestartGivesAWaitingJobAFreshWait) {
  StartJob(2, 2);
  clock_.Advance(kLease + 1);
  AllBeatExcept({"w2"});
  ExpireLeases(state_, clock_.Now(), kLease);
  clock_.Advance(kMinWorkersWait - 1);
  MarkRestarted(state_, clock_.Now());
  clock_.Advance(10);
  AllBeatExcept({});
  Advance();
  EXPECT_EQ(Job("j").info.state(), v1::RUNNING);
}

TEST_F(ClusterStateTest, StaleGenerationsAreFenced) {
  StartJob(2, 1);
  ASSERT_TRUE(ReportFailure("w1", 1, 0).ok());
  // Generation 1 (stale) is refused; generation 2 is current.
  for (int64_t stale : {int64_t{1}, int64_t{3}}) {
    absl::Status status = CheckCurrentGeneration(state_, "j", stale);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(status.message()), HasSubstr("is not current (current: 2)"));
    EXPECT_EQ(ReportFailure("w1", stale, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_TRUE(CheckCurrentGeneration(state_, "j", 2).ok());
  EXPECT_THAT(Job("j").generation.members, ElementsAre("w1", "w2"));
}

}  // namespace
}  // namespace herd::coordinator
