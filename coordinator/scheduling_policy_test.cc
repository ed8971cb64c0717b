#include "coordinator/scheduling_policy.h"

#include <algorithm>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "coordinator/generations.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

v1::JobSpec Spec(int64_t min_workers, int64_t max_workers, int64_t priority = 0, bool preemptible = false) {
  v1::JobSpec spec;
  spec.set_min_workers(min_workers);
  spec.set_max_workers(max_workers);
  spec.set_device(v1::DEVICE_CPU);
  spec.set_priority(priority);
  spec.set_preemptible(preemptible);
  return spec;
}

class SchedulingPolicyTest : public ::testing::Test {
 protected:
  void AddWorkers(int count, const std::string& device = "cpu") {
    for (int i = 0; i < count; ++i) {
      v1::RegisterWorkerRequest request;
      request.set_worker_id(device + "-w" + std::to_string(state_.workers.size() + 1));
      request.set_device_kind(device);
      UpsertWorker(state_, request, now_);
    }
  }
  // A cpu worker `id` with these --label labels.
  void AddLabelled(const std::string& id, const std::map<std::string, std::string>& labels) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_device_kind("cpu");
    request.mutable_labels()->insert(labels.begin(), labels.end());
    UpsertWorker(state_, request, now_);
  }
  void Submit(const std::string& id, const v1::JobSpec& spec) {
    ChangeSet changes;
    AddPendingJob(state_, id, spec, now_, &changes);
  }
  // Submits `id` and schedules it; it must start with `workers` workers.
  void Run(const std::string& id, const v1::JobSpec& spec, size_t workers) {
    Submit(id, spec);
    Schedule(state_, now_);
    ASSERT_EQ(Job(id).info.state(), v1::RUNNING) << id;
    ASSERT_EQ(Job(id).generation.members.size(), workers) << id;
  }
  const JobRecord& Job(const std::string& id) { return state_.jobs.at(id); }
  std::vector<std::pair<std::string, std::string>> Releases(const SchedulePlan& plan) {
    std::vector<std::pair<std::string, std::string>> releases;
    for (const MemberRelease& release : plan.releases) releases.emplace_back(release.job_id, release.worker_id);
    return releases;
  }
  // The member's trainer left at the boundary (release.h).
  void CompleteRelease(const std::string& job_id, const std::string& worker_id) {
    v1::TrainerExit exit;
    exit.set_job_id(job_id);
    exit.set_generation(Job(job_id).generation.number);
    exit.set_exit_code(v1::TRAINER_EXIT_RELEASED);
    ApplyTrainerExit(state_, worker_id, exit, now_);
    ASSERT_EQ(state_.workers.at(worker_id).state, v1::IDLE);
  }

  ClusterState state_;
  double now_ = 1000;
};

TEST_F(SchedulingPolicyTest, HigherPriorityStartsFirst) {
  AddWorkers(2);
  Submit("low", Spec(2, 2, 0));
  Submit("high", Spec(2, 2, 5));
  const SchedulePlan plan = PlanSchedule(state_);
  ASSERT_EQ(plan.starts.size(), 1u);
  EXPECT_EQ(plan.starts[0].job_id, "high");
  EXPECT_THAT(plan.starts[0].workers, ElementsAre("cpu-w1", "cpu-w2"));
}

TEST_F(SchedulingPolicyTest, EqualPrioritiesKeepSubmitOrderAndNeverPreemptEachOther) {
  AddWorkers(3);
  Run("first", Spec(1, 3, 2), 3);
  Submit("second", Spec(2, 2, 2));
  Submit("third", Spec(1, 1, 2));
  // Nothing is idle and nobody ranks below them: both wait, nothing released.
  SchedulePlan plan = PlanSchedule(state_);
  EXPECT_THAT(plan.starts, IsEmpty());
  EXPECT_THAT(plan.releases, IsEmpty());
  // One worker frees up: "second" (submitted first) does not fit, "third"
  // backfills; with two free "second" goes first.
  state_.jobs.at("first").info.set_state(v1::SUCCEEDED);
  state_.workers.at("cpu-w1").state = v1::IDLE;
  state_.workers.at("cpu-w2").state = v1::IDLE;
  plan = PlanSchedule(state_);
  ASSERT_EQ(plan.starts.size(), 1u);
  EXPECT_EQ(plan.starts[0].job_id, "second");
}

TEST_F(SchedulingPolicyTest, ShrinksTheLowestPriorityNewestJobFirstAndNeverBelowMin) {
  AddWorkers(6);
  Run("old-low", Spec(1, 2, 0), 2);
  Run("new-low", Spec(1, 2, 0), 2);
  Run("mid", Spec(1, 2, 1), 2);
  Submit("high", Spec(2, 2, 9));
  const SchedulePlan plan = PlanSchedule(state_);
  // Each low job can give one worker (down to min_workers 1), its highest
  // rank; the newest goes first. "mid" keeps both.
  EXPECT_THAT(Releases(plan), ElementsAre(Pair("new-low", "cpu-w4"), Pair("old-low", "cpu-w2")));
  for (const MemberRelease& release : plan.releases) EXPECT_EQ(release.reason, ReleaseReason::kShrink);
  EXPECT_THAT(plan.preempted,
              UnorderedElementsAre(Pair("new-low", Preemption::kShrink), Pair("old-low", Preemption::kShrink)));
  EXPECT_THAT(plan.starts, IsEmpty());
}

TEST_F(SchedulingPolicyTest, TakesOnlyWhatTheWaitingJobNeedsToStart) {
  AddWorkers(3);
  Run("low", Spec(1, 3), 3);
  Submit("high", Spec(1, 3, 1));
  const SchedulePlan plan = PlanSchedule(state_);
  // high asks for 1 to 3 workers: it waits for its min_workers, no more.
  EXPECT_THAT(Releases(plan), ElementsAre(Pair("low", "cpu-w3")));
}

TEST_F(SchedulingPolicyTest, PreemptsNothingWhenThatCannotStartTheJob) {
  AddWorkers(3);
  Run("low", Spec(2, 3), 3);
  Submit("high", Spec(3, 3, 1));  // low can give only one
  Submit("small", Spec(1, 1));
  const SchedulePlan plan = PlanSchedule(state_);
  EXPECT_THAT(plan.releases, IsEmpty());
  EXPECT_THAT(plan.reserved, IsEmpty());
}

TEST_F(SchedulingPolicyTest, HigherPriorityJobsAreNotPreempted) {
  AddWorkers(2);
  Run("high", Spec(1, 2, 5), 2);
  Submit("low", Spec(1, 1, 0));
  EXPECT_THAT(PlanSchedule(state_).releases, IsEmpty());
}

TEST_F(SchedulingPolicyTest, ReleasedWorkersAreReservedForTheWaitingJobUntilItStarts) {
  AddWorkers(4);
  Run("low", Spec(1, 3), 3);
  Submit("high", Spec(3, 3, 1));  // one idle worker plus two from low
  ChangeSet changes = Schedule(state_, now_);
  EXPECT_THAT(changes.preemptions, ElementsAre(Preemption::kShrink));
  EXPECT_THAT(Job("low").release_requested,
              UnorderedElementsAre(Pair("cpu-w3", ReleaseReason::kShrink), Pair("cpu-w2", ReleaseReason::kShrink)));
  EXPECT_THAT(state_.reserved, ElementsAre(Pair("cpu-w4", "high")));
  EXPECT_EQ(Job("high").info.reason(), "waiting for workers released by lower-priority jobs: have 1, need 3");

  // A stream of smaller, later jobs cannot take the reserved worker, nor can
  // another running job grow into it, and the workers on their way are not
  // asked for twice.
  Submit("small", Spec(1, 1));
  changes = Schedule(state_, now_);
  EXPECT_EQ(Job("small").info.state(), v1::PENDING);
  EXPECT_THAT(changes.preemptions, IsEmpty());
  EXPECT_THAT(IdleWorkersFor(state_, "small", Job("small").info.spec()), IsEmpty());
  EXPECT_THAT(IdleWorkersFor(state_, "high", Job("high").info.spec()), ElementsAre("cpu-w4"));

  CompleteRelease("low", "cpu-w3");
  Schedule(state_, now_);
  EXPECT_EQ(Job("small").info.state(), v1::PENDING);
  EXPECT_THAT(state_.reserved, UnorderedElementsAre(Pair("cpu-w3", "high"), Pair("cpu-w4", "high")));

  CompleteRelease("low", "cpu-w2");
  changes = Schedule(state_, now_);
  EXPECT_EQ(Job("high").info.state(), v1::RUNNING);
  EXPECT_THAT(Job("high").generation.members, ElementsAre("cpu-w2", "cpu-w3", "cpu-w4"));
  EXPECT_THAT(Job("low").generation.members, ElementsAre("cpu-w1"));
  EXPECT_EQ(Job("small").info.state(), v1::PENDING);
  EXPECT_THAT(state_.reserved, IsEmpty());
}

TEST_F(SchedulingPolicyTest, AJobReformedAfterAReleaseDoesNotTakeBackWhatItGaveAway) {
  AddWorkers(3);
  Run("low", Spec(1, 3), 3);
  Submit("high", Spec(2, 2, 1));
  Schedule(state_, now_);
  // Both leave before the scheduler runs again: the second re-form must not
  // take the first one back although low is below max_workers.
  CompleteRelease("low", "cpu-w3");
  CompleteRelease("low", "cpu-w2");
  EXPECT_THAT(Job("low").generation.members, ElementsAre("cpu-w1"));
  Schedule(state_, now_);
  EXPECT_EQ(Job("high").info.state(), v1::RUNNING);
  EXPECT_THAT(Job("high").generation.members, ElementsAre("cpu-w2", "cpu-w3"));
}

TEST_F(SchedulingPolicyTest, AWaitingJobGivesUpItsReservationWhenItNoLongerOutranksItsVictim) {
  AddWorkers(3);
  Run("low", Spec(1, 2), 2);
  Submit("high", Spec(2, 2, 1));
  Schedule(state_, now_);
  EXPECT_THAT(state_.reserved, ElementsAre(Pair("cpu-w3", "high")));
  EXPECT_EQ(Job("high").info.reason(), "waiting for workers released by lower-priority jobs: have 1, need 2");
  // `herd priority low 5`: the worker low is releasing is no longer high's.
  state_.jobs.at("low").info.mutable_spec()->set_priority(5);
  Schedule(state_, now_);
  EXPECT_THAT(state_.reserved, IsEmpty());
  EXPECT_EQ(Job("high").info.reason(), "waiting for workers");
}

TEST_F(SchedulingPolicyTest, RunningJobsGrowOnlyAfterPendingJobsAreServed) {
  AddWorkers(3);
  Run("low", Spec(1, 3), 3);
  Submit("high", Spec(2, 2, 1));
  GenerationOptions options;
  options.lease_seconds = 10;
  now_ += 100;  // past the join rate limit
  AdvanceGenerations(state_, now_, options);
  EXPECT_THAT(Job("low").release_requested,
              UnorderedElementsAre(Pair("cpu-w3", ReleaseReason::kShrink), Pair("cpu-w2", ReleaseReason::kShrink)));
  CompleteRelease("low", "cpu-w3");
  now_ += 100;
  AdvanceGenerations(state_, now_, options);
  // low, shrinking and below max_workers, does not take back its worker.
  EXPECT_THAT(Job("low").generation.members, ElementsAre("cpu-w1", "cpu-w2"));
  EXPECT_EQ(state_.workers.at("cpu-w3").state, v1::IDLE);
  CompleteRelease("low", "cpu-w2");
  now_ += 100;
  AdvanceGenerations(state_, now_, options);
  EXPECT_EQ(Job("high").info.state(), v1::RUNNING);
  EXPECT_THAT(Job("low").generation.members, ElementsAre("cpu-w1"));
}

TEST_F(SchedulingPolicyTest, SuspendsOnlyPreemptibleJobsAtTheirMinimum) {
  AddWorkers(4);
  Run("batch", Spec(2, 3, 0, /*preemptible=*/true), 3);
  Run("steady", Spec(1, 1, 0), 1);
  Submit("high", Spec(3, 3, 1));
  SchedulePolicyOptions suspending;
  suspending.suspend = true;
  SchedulePlan plan = PlanSchedule(state_, suspending);
  // Shrinking batch to its minimum frees one; steady is at its minimum and
  // not preemptible; so batch is suspended: every member leaves.
  EXPECT_THAT(Releases(plan), UnorderedElementsAre(Pair("batch", "cpu-w1"), Pair("batch", "cpu-w2"),
                                                   Pair("batch", "cpu-w3")));
  for (const MemberRelease& release : plan.releases) EXPECT_EQ(release.reason, ReleaseReason::kSuspend);
  EXPECT_THAT(plan.preempted, ElementsAre(Pair("batch", Preemption::kSuspend)));

  // Suspension is the default.
  EXPECT_EQ(Releases(PlanSchedule(state_)), Releases(plan));

  // Without suspension nothing is asked: shrinking alone cannot start
  // high, and nothing is reserved.
  SchedulePolicyOptions shrinking_only;
  shrinking_only.suspend = false;
  plan = PlanSchedule(state_, shrinking_only);
  EXPECT_THAT(plan.releases, IsEmpty());
  EXPECT_THAT(plan.reserved, IsEmpty());

  // Needing only what shrinking gives, nothing is suspended.
  state_.jobs.at("high").info.mutable_spec()->set_min_workers(1);
  state_.jobs.at("high").info.mutable_spec()->set_max_workers(1);
  plan = PlanSchedule(state_, suspending);
  EXPECT_THAT(Releases(plan), ElementsAre(Pair("batch", "cpu-w3")));
  EXPECT_THAT(plan.preempted, ElementsAre(Pair("batch", Preemption::kShrink)));
}

TEST_F(SchedulingPolicyTest, NonPreemptibleJobsAtTheirMinimumAreNeverSuspended) {
  AddWorkers(2);
  Run("low", Spec(2, 2, 0), 2);
  Submit("high", Spec(1, 1, 1));
  SchedulePolicyOptions suspending;
  suspending.suspend = true;
  EXPECT_THAT(PlanSchedule(state_, suspending).releases, IsEmpty());
}

TEST_F(SchedulingPolicyTest, PreemptsOnlyJobsOfTheSameDeviceKind) {
  AddWorkers(2, "cpu");
  AddWorkers(2, "cuda");
  Run("low", Spec(1, 2), 2);  // cpu
  v1::JobSpec high = Spec(1, 1, 1);
  high.set_device(v1::DEVICE_CUDA);
  Submit("high", high);
  v1::JobSpec cuda_low = Spec(1, 2);
  cuda_low.set_device(v1::DEVICE_CUDA);
  // The cuda job fits without preempting anyone.
  const SchedulePlan plan = PlanSchedule(state_);
  EXPECT_THAT(plan.releases, IsEmpty());
  ASSERT_EQ(plan.starts.size(), 1u);
  EXPECT_THAT(plan.starts[0].workers, ElementsAre("cuda-w3"));
}

v1::JobSpec Requiring(v1::JobSpec spec, const std::map<std::string, std::string>& require) {
  spec.mutable_placement()->mutable_require()->insert(require.begin(), require.end());
  return spec;
}

v1::JobSpec IslandsBy(v1::JobSpec spec, const std::string& key) {
  spec.mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
  spec.mutable_sync()->set_islands_by(key);
  return spec;
}

TEST_F(SchedulingPolicyTest, PlacementTakesOnlyWorkersWithEveryRequiredLabel) {
  AddLabelled("a", {{"pool", "t4"}});
  AddLabelled("b", {{"pool", "a100"}, {"site", "east"}});
  AddLabelled("c", {});
  AddLabelled("d", {{"pool", "a100"}, {"site", "west"}});
  AddLabelled("e", {{"pool", "a100"}});
  Run("job", Requiring(Spec(1, 5), {{"pool", "a100"}, {"site", "west"}}), 1);
  EXPECT_THAT(Job("job").generation.members, ElementsAre("d"));
  Run("any-a100", Requiring(Spec(1, 5), {{"pool", "a100"}}), 2);
  EXPECT_THAT(Job("any-a100").generation.members, ElementsAre("b", "e"));
  Run("free", Spec(1, 5), 2);  // no placement: any worker
  EXPECT_THAT(Job("free").generation.members, ElementsAre("a", "c"));
}

TEST_F(SchedulingPolicyTest, IslandsByTakesOnlyWorkersWithTheKeyAndOrdersRanksByIsland) {
  AddLabelled("w1", {{"site", "west"}});
  AddLabelled("w2", {{"site", "east"}});
  AddLabelled("w3", {});
  AddLabelled("w4", {{"site", "west"}});
  AddLabelled("w5", {{"site", "east"}});
  Run("job", IslandsBy(Spec(2, 8), "site"), 4);
  // Islands contiguous, ascending by value; worker-id order within one.
  EXPECT_THAT(Job("job").generation.members, ElementsAre("w2", "w5", "w1", "w4"));
}

// A joiner lands inside its island, behind that island's survivors.
TEST_F(SchedulingPolicyTest, JoinersTakeTheirPlaceInTheirIsland) {
  AddLabelled("w1", {{"site", "west"}});
  AddLabelled("w2", {{"site", "east"}});
  AddLabelled("w3", {{"site", "west"}});
  Run("job", IslandsBy(Spec(2, 8), "site"), 3);
  EXPECT_THAT(Job("job").generation.members, ElementsAre("w2", "w1", "w3"));
  AddLabelled("w0", {{"site", "east"}});
  const int64_t generation = Job("job").generation.number;
  ASSERT_TRUE(ReformAtBoundary(state_, "job", "w1", generation, now_).ok());
  EXPECT_EQ(Job("job").generation.number, generation + 1);
  EXPECT_THAT(Job("job").generation.members, ElementsAre("w2", "w0", "w1", "w3"));
}

TEST_F(SchedulingPolicyTest, JobNoWorkerFitsStaysPendingNamingTheRequirement) {
  AddLabelled("a", {{"pool", "t4"}});
  AddLabelled("b", {{"pool", "a100"}});
  Submit("job", Requiring(Spec(2, 2), {{"pool", "a100"}}));
  Schedule(state_, now_);
  EXPECT_EQ(Job("job").info.state(), v1::PENDING);
  EXPECT_EQ(Job("job").pending_reason, PendingReason::kNoFittingWorkers);
  EXPECT_EQ(Job("job").info.reason(), "waiting for workers with placement.require pool=a100: 1 registered fit, need 2");
  EXPECT_EQ(state_.workers.at("a").state, v1::IDLE);
  EXPECT_EQ(state_.workers.at("b").state, v1::IDLE);

  Submit("islands", IslandsBy(Spec(1, 1), "site"));
  Schedule(state_, now_);
  EXPECT_EQ(Job("islands").info.reason(), "waiting for workers with sync.islands_by site: 0 registered fit, need 1");

  // A second a100 worker registers: the job starts on the two.
  AddLabelled("c", {{"pool", "a100"}});
  Schedule(state_, now_);
  EXPECT_EQ(Job("job").info.state(), v1::RUNNING);
  EXPECT_THAT(Job("job").generation.members, ElementsAre("b", "c"));
  EXPECT_EQ(Job("job").info.reason(), "");
}

// Enough workers fit but are busy: the plain reason, not the placement one.
TEST_F(SchedulingPolicyTest, FittingWorkersBusyIsPlainWaiting) {
  AddLabelled("a", {{"pool", "a100"}});
  Run("first", Spec(1, 1), 1);
  Submit("job", Requiring(Spec(1, 1), {{"pool", "a100"}}));
  Schedule(state_, now_);
  EXPECT_EQ(Job("job").info.state(), v1::PENDING);
  EXPECT_EQ(Job("job").pending_reason, PendingReason::kWaitingForWorkers);
  EXPECT_EQ(Job("job").info.reason(), WaitingForWorkersText());
}

// A higher-priority job shrinks a lower one only by members it can use.
TEST_F(SchedulingPolicyTest, PreemptionReleasesOnlyFittingMembers) {
  AddLabelled("w1", {{"pool", "a100"}});
  AddLabelled("w2", {{"pool", "t4"}});
  AddLabelled("w3", {{"pool", "t4"}});
  AddLabelled("w4", {{"pool", "a100"}});
  Run("low", Spec(1, 4, 0), 4);
  Submit("high", Requiring(Spec(1, 1, 5), {{"pool", "a100"}}));
  const SchedulePlan plan = PlanSchedule(state_);
  // w4 is the highest-ranked member that fits (w3 is higher but a t4).
  EXPECT_THAT(Releases(plan), ElementsAre(Pair("low", "w4")));
}

// Nothing in a lower job fits: no release is asked for nothing.
TEST_F(SchedulingPolicyTest, NoPreemptionWhenNoMemberFits) {
  AddLabelled("w1", {{"pool", "t4"}});
  AddLabelled("w2", {{"pool", "t4"}});
  Run("low", Spec(1, 2, 0, /*preemptible=*/true), 2);
  Submit("high", Requiring(Spec(1, 1, 5), {{"pool", "a100"}}));
  const SchedulePlan plan = PlanSchedule(state_);
  EXPECT_THAT(plan.releases, IsEmpty());
  EXPECT_THAT(plan.preempted, IsEmpty());
}

// A job of islands of at least 2 (east: w1 w2, west: w3 w4 w5) gives a
// higher-priority job the members beyond its islands' minimum, and whole
// islands only after: never an island left with one member, which would sit
// out of its next generation (island_members.h) and cost the job more than
// the plan counted.
class PreemptingIslandsTest : public SchedulingPolicyTest {
 protected:
  void SetUp() override {
    AddLabelled("w1", {{"site", "east"}});
    AddLabelled("w2", {{"site", "east"}});
    AddLabelled("w3", {{"site", "west"}});
    AddLabelled("w4", {{"site", "west"}});
    AddLabelled("w5", {{"site", "west"}});
    v1::JobSpec low = IslandsBy(Spec(2, 5), "site");
    low.mutable_sync()->set_min_workers_per_island(2);
    Run("low", low, 5);
    ASSERT_THAT(Job("low").generation.members, ElementsAre("w1", "w2", "w3", "w4", "w5"));
  }
  // How many members each island of "low" keeps after `plan`'s releases.
  std::map<std::string, int> Kept(const SchedulePlan& plan) {
    std::map<std::string, int> kept;
    for (const std::string& member : Job("low").generation.members) {
      const bool leaves = std::any_of(plan.releases.begin(), plan.releases.end(),
                                      [&](const MemberRelease& r) { return r.worker_id == member; });
      if (!leaves) ++kept[state_.workers.at(member).labels.at("site")];
    }
    return kept;
  }
};

TEST_F(PreemptingIslandsTest, OneNeededLeavesFromTheIslandAboveItsMinimum) {
  Submit("high", Spec(1, 1, 5));
  const SchedulePlan plan = PlanSchedule(state_);
  EXPECT_THAT(Releases(plan), ElementsAre(Pair("low", "w5")));
  EXPECT_THAT(Kept(plan), UnorderedElementsAre(Pair("east", 2), Pair("west", 2)));
}

TEST_F(PreemptingIslandsTest, TwoNeededTakeAWholeIslandRatherThanLeaveOneAlone) {
  // Member by member, w5 and w4 would go and leave w3 alone in the west.
  Submit("high", Spec(2, 2, 5));
  const SchedulePlan plan = PlanSchedule(state_);
  EXPECT_THAT(Releases(plan), ElementsAre(Pair("low", "w5"), Pair("low", "w4"), Pair("low", "w3")));
  EXPECT_THAT(Kept(plan), UnorderedElementsAre(Pair("east", 2)));
  EXPECT_THAT(plan.preempted, UnorderedElementsAre(Pair("low", Preemption::kShrink)));
}

TEST_F(PreemptingIslandsTest, NoWholeIslandGoesBelowTheJobsMinWorkers) {
  // low may shrink by 1 (min_workers 4 of 5): w5, but no island can go whole
  // and nothing else leaves without stranding one member: high cannot start.
  state_.jobs.at("low").info.mutable_spec()->set_min_workers(4);
  Submit("high", Spec(2, 2, 5));
  const SchedulePlan plan = PlanSchedule(state_);
  EXPECT_THAT(plan.releases, IsEmpty());
  EXPECT_THAT(plan.preempted, IsEmpty());
}

// A waiting job with islands of at least 2 (by site) and a victim without
// islands: only workers that complete the waiting job's islands count.
class PreemptingForIslandsTest : public SchedulingPolicyTest {
 protected:
  // "low" (2-4 workers, no islands) runs on `victim_sites` (w3, w4, ...,
  // rank 0 first); w1 (site a) and w2 (site b) are idle; "high" waits for 4
  // in islands of 2.
  void Start(const std::vector<std::string>& victim_sites) {
    for (size_t i = 0; i < victim_sites.size(); ++i) {
      AddLabelled("w" + std::to_string(i + 3), {{"site", victim_sites[i]}});
    }
    Run("low", Spec(2, 4), victim_sites.size());
    AddLabelled("w1", {{"site", "a"}});
    AddLabelled("w2", {{"site", "b"}});
    v1::JobSpec high = Spec(4, 4, 5);
    high.mutable_sync()->set_islands_by("site");
    high.mutable_sync()->set_min_workers_per_island(2);
    Submit("high", high);
  }
};

TEST_F(PreemptingForIslandsTest, TheWorkersTakenCompleteTheWaitingJobsIslands) {
  // By rank alone w6 (d) and w5 (c) would go, and high could not start.
  Start({"a", "b", "c", "d"});
  const SchedulePlan plan = PlanSchedule(state_);
  EXPECT_THAT(Releases(plan), ElementsAre(Pair("low", "w4"), Pair("low", "w3")));
  EXPECT_THAT(plan.preempted, UnorderedElementsAre(Pair("low", Preemption::kShrink)));
  ASSERT_EQ(plan.waiting.count("high"), 1u);
}

TEST_F(PreemptingForIslandsTest, NoJobShrinksForWorkersThatCannotStartTheWaitingOne) {
  // low can give 2, but no 2 of its workers complete sites a and b.
  Start({"c", "d", "c", "d"});
  const SchedulePlan plan = PlanSchedule(state_);
  EXPECT_THAT(plan.releases, IsEmpty());
  EXPECT_THAT(plan.preempted, IsEmpty());
  EXPECT_EQ(plan.waiting.count("high"), 0u);
}

}  // namespace
}  // namespace herd::coordinator
