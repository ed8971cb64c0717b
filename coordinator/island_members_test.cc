// Islands with a minimum (sync.min_workers_per_island): who forms a
// generation, and how the job starts, loses an island's member, leaves a
// short island out, loses a whole site and takes the site back.
#include "coordinator/island_members.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "coordinator/generations.h"
#include "coordinator/release.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr double kLease = 10;

v1::JobSpec IslandSpec(int64_t min_workers, int64_t max_workers, int64_t per_island) {
  v1::JobSpec spec;
  spec.set_min_workers(min_workers);
  spec.set_max_workers(max_workers);
  spec.set_device(v1::DEVICE_CPU);
  spec.set_restart_budget(3);
  spec.mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
  spec.mutable_sync()->set_islands_by("site");
  spec.mutable_sync()->set_min_workers_per_island(per_island);
  return spec;
}

class IslandMembersTest : public ::testing::Test {
 protected:
  // Worker `id` at site `site`.
  void AddWorker(const std::string& id, const std::string& site) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_device_kind("cpu");
    (*request.mutable_labels())["site"] = site;
    UpsertWorker(state_, request, now_);
  }
  // a1, a2 at site a and b1, b2 at site b.
  void AddTwoSites() {
    AddWorker("a1", "a");
    AddWorker("a2", "a");
    AddWorker("b1", "b");
    AddWorker("b2", "b");
  }
  void Submit(const v1::JobSpec& spec) {
    ChangeSet changes;
    AddPendingJob(state_, "j", spec, now_, &changes);
  }
  const JobRecord& Job() { return state_.jobs.at("j"); }
  ChangeSet Advance() {
    GenerationOptions options;
    options.lease_seconds = kLease;
    return AdvanceGenerations(state_, now_, options);
  }
  // Everyone but `silent` heartbeats now, saying which jobs its trainer runs.
  void Beat(const std::set<std::string>& silent, const std::set<std::string>& running_j) {
    for (auto& [id, worker] : state_.workers) {
      if (silent.count(id)) continue;
      v1::HeartbeatRequest beat;
      beat.set_worker_id(id);
      if (running_j.count(id)) beat.add_running_jobs("j");
      ApplyHeartbeat(state_, beat, now_);
    }
  }
  // The re-form upkeep asks for, done at the boundary; false if none asked.
  bool ReformAtNextBoundary() {
    Advance();
    const std::string& rank0 = Job().generation.members.at(0);
    const auto asked = ReformJobsFor(state_, rank0);
    if (asked.empty()) return false;
    auto reformed = ReformAtBoundary(state_, "j", rank0, asked[0].generation(), now_);
    EXPECT_TRUE(reformed.ok()) << reformed.status();
    return true;
  }

  ClusterState state_;
  double now_ = 1000;
};

TEST_F(IslandMembersTest, WithoutAMinimumEverySurvivorAndJoinersUpToTheLimit) {
  AddTwoSites();
  const v1::JobSpec spec = IslandSpec(1, 3, 1);
  EXPECT_THAT(ChooseMembers(state_, spec, {"b1"}, {"a1", "a2", "b2"}, 3), ElementsAre("b1", "a1", "a2"));
  // Survivors are never cut by the limit.
  EXPECT_THAT(ChooseMembers(state_, spec, {"b1", "a1"}, {"a2"}, 1), ElementsAre("b1", "a1"));
}

TEST_F(IslandMembersTest, AnIslandShortOfItsMinimumSitsOut) {
  AddTwoSites();
  AddWorker("c1", "c");
  const v1::JobSpec spec = IslandSpec(1, 5, 2);
  // Site c has one worker: it sits out; a and b form.
  EXPECT_THAT(ChooseMembers(state_, spec, {}, {"a1", "a2", "b1", "b2", "c1"}, 5),
              ElementsAre("a1", "a2", "b1", "b2"));
  // A survivor whose island lost its partner sits out too.
  EXPECT_THAT(ChooseMembers(state_, spec, {"a1", "a2", "b1"}, {}, 5), ElementsAre("a1", "a2"));
  // ... and comes back with a joiner of its island, ahead of it.
  EXPECT_THAT(ChooseMembers(state_, spec, {"a1", "a2", "b1"}, {"b2"}, 5), ElementsAre("a1", "a2", "b1", "b2"));
  // Nobody is chosen when no island reaches the minimum.
  EXPECT_THAT(ChooseMembers(state_, spec, {"a1"}, {"b1", "c1"}, 5), IsEmpty());
  EXPECT_EQ(IslandsSittingOut(state_, spec, {"a1", "a2", "b1", "c1"}, {"a1", "a2"}),
            (std::map<std::string, int64_t>{{"b", 1}, {"c", 1}}));
  EXPECT_TRUE(IslandsSittingOut(state_, spec, {"a1", "a2"}, {"a1", "a2"}).empty());
}

TEST_F(IslandMembersTest, TheLimitFillsWholeIslandsFirst) {
  AddTwoSites();
  AddWorker("a3", "a");
  const v1::JobSpec spec = IslandSpec(1, 4, 2);
  // Site a alone could fill the limit of 4... but b's minimum comes first,
  // then what is left goes to the joiners in order.
  EXPECT_THAT(ChooseMembers(state_, spec, {}, {"a1", "a2", "a3", "b1", "b2"}, 4),
              ElementsAre("a1", "a2", "b1", "b2"));
  // A limit of 3 has room for one island's minimum and one more of it.
  EXPECT_THAT(ChooseMembers(state_, spec, {}, {"a1", "b1", "a2", "b2", "a3"}, 3), ElementsAre("a1", "a2", "a3"));
  // Survivors that reach the minimum stay beyond the limit; no room is left for b.
  EXPECT_THAT(ChooseMembers(state_, spec, {"a1", "a2", "a3"}, {"b1", "b2"}, 3), ElementsAre("a1", "a2", "a3"));
}

TEST_F(IslandMembersTest, TheJobStartsOnlyWithIslandsThatReachTheirMinimum) {
  AddWorker("a1", "a");
  AddWorker("a2", "a");
  AddWorker("b1", "b");
  Submit(IslandSpec(3, 4, 2));
  Schedule(state_, now_);
  // Three idle workers, but b has one: a alone is below min_workers 3.
  EXPECT_EQ(Job().info.state(), v1::PENDING);
  AddWorker("b2", "b");
  Schedule(state_, now_);
  ASSERT_EQ(Job().info.state(), v1::RUNNING);
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2", "b1", "b2"));
}

TEST_F(IslandMembersTest, AnIslandThatLosesAMemberGoesOnSmallerAtTheDefaultMinimum) {
  AddTwoSites();
  Submit(IslandSpec(2, 4, 1));
  Schedule(state_, now_);
  ASSERT_EQ(Job().generation.members.size(), 4u);
  const int64_t first = Job().generation.number;
  now_ += kLease + 1;
  Beat({"b2"}, {"a1", "a2", "b1"});
  ExpireLeases(state_, now_, kLease);
  EXPECT_GT(Job().generation.number, first);
  EXPECT_TRUE(Job().generation.formed);
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2", "b1"));
}

TEST_F(IslandMembersTest, AnIslandBelowItsMinimumSitsOutHeldUntilItCanRejoin) {
  AddTwoSites();
  Submit(IslandSpec(2, 4, 2));
  Schedule(state_, now_);
  ASSERT_EQ(Job().generation.members.size(), 4u);
  now_ += kLease + 1;
  Beat({"b2"}, {"a1", "a2", "b1"});
  ExpireLeases(state_, now_, kLease);
  // Site b has one rank left: it sits out, and site a goes on.
  ASSERT_TRUE(Job().generation.formed);
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2"));
  // b1's trainer still runs the job with its commit: held for it, taken by
  // no other job, and the job does not re-form for it while b is short.
  EXPECT_EQ(state_.workers.at("b1").state, v1::IDLE);
  EXPECT_EQ(HeldForJob(state_, state_.workers.at("b1")), "j");
  EXPECT_EQ(Job().info.reason(),
            "island 'b' (1 worker) sits out: fewer than sync.min_workers_per_island (2) workers available; rejoins "
            "when it has enough");
  now_ += kLease + 1;
  Beat({"b2"}, {"a1", "a2", "b1"});
  const int64_t without_b = Job().generation.number;
  EXPECT_FALSE(ReformAtNextBoundary()) << "re-formed into the same members";
  EXPECT_EQ(Job().generation.number, without_b);
  // b2 returns (its daemon registers again): site b rejoins whole, b1
  // (held, its commit kept) first.
  AddWorker("b2", "b");
  Beat({}, {"a1", "a2", "b1"});
  ASSERT_TRUE(ReformAtNextBoundary());
  EXPECT_TRUE(Job().generation.formed);
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2", "b1", "b2"));
  EXPECT_EQ(Job().info.reason(), "");
}

TEST_F(IslandMembersTest, AWholeSiteLostLeavesTheOtherGoingOnAndItsReturnReformsTheJob) {
  AddTwoSites();
  Submit(IslandSpec(2, 4, 2));
  Schedule(state_, now_);
  const int64_t first = Job().generation.number;
  // Site b is cut off: both its leases lapse at once, one new generation.
  now_ += kLease + 1;
  Beat({"b1", "b2"}, {"a1", "a2"});
  ExpireLeases(state_, now_, kLease);
  EXPECT_EQ(Job().generation.number, first + 1);
  EXPECT_EQ(Job().info.state(), v1::RUNNING);
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2"));
  EXPECT_EQ(Job().restarts_used, 1);
  // The link returns: b's daemons register again with their trainers still
  // running the job, and the job re-forms with both sites at a boundary.
  for (const std::string id : {"b1", "b2"}) AddWorker(id, "b");
  Beat({}, {"a1", "a2", "b1", "b2"});
  now_ += kLease + 1;
  Beat({}, {"a1", "a2", "b1", "b2"});
  ASSERT_TRUE(ReformAtNextBoundary());
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2", "b1", "b2"));
  EXPECT_EQ(Job().restarts_used, 1) << "taking a site back is no failure";
}

TEST_F(IslandMembersTest, OnlyAShortIslandHoldingTheCommitMakesTheJobWaitRatherThanStartOver) {
  AddTwoSites();
  Submit(IslandSpec(2, 4, 2));
  Schedule(state_, now_);
  ASSERT_EQ(Job().generation.members.size(), 4u);
  // Rank 0 reports a commit: every member holds it in memory.
  v1::ReportProgressRequest report;
  report.set_job_id("j");
  report.set_generation(Job().generation.number);
  report.set_rank(0);
  report.set_step(20);
  ChangeSet committed;
  ASSERT_FALSE(ApplyProgress(state_, report, now_, &committed));
  // Everyone but b1 is lost; two fresh workers of site a register.
  now_ += kLease + 1;
  Beat({"a1", "a2", "b2"}, {"b1"});
  AddWorker("a3", "a");
  AddWorker("a4", "a");
  ExpireLeases(state_, now_, kLease);
  // a3 and a4 would make site a, but hold no commit: b1 alone holds it,
  // short of its island's minimum. The job waits instead of starting over.
  EXPECT_FALSE(Job().generation.formed);
  EXPECT_THAT(Job().generation.members, ElementsAre("b1"));
  // A second worker of site b: both islands form, healed from b1's commit.
  AddWorker("b3", "b");
  Advance();
  ASSERT_TRUE(Job().generation.formed);
  EXPECT_THAT(Job().generation.members, ElementsAre("a3", "a4", "b1", "b3"));
}

}  // namespace
}  // namespace herd::coordinator
