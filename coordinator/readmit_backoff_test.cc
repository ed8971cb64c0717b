// Members left out because a peer could not reach them: how long they stay
// out, who goes with them when islands are cut apart, and a job whose sites
// still reach the coordinator but not each other, which trains on one side
// without flapping and takes the other back when the link returns.
#include "coordinator/readmit_backoff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "coordinator/generations.h"

namespace herd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr double kLease = 10;

TEST(ReadmitBackoff, DoublesFromOneLeaseUpToSixteen) {
  EXPECT_EQ(ReadmitBackoffSeconds(0, kLease), 10);
  EXPECT_EQ(ReadmitBackoffSeconds(1, kLease), 20);
  EXPECT_EQ(ReadmitBackoffSeconds(3, kLease), 80);
  EXPECT_EQ(ReadmitBackoffSeconds(kMaxReadmitStrikes, kLease), 160);
  EXPECT_EQ(ReadmitBackoffSeconds(kMaxReadmitStrikes + 3, kLease), 160);
}

TEST(ReadmitBackoff, AStrikeOnlyForFailingInTheGenerationItCameBackIn) {
  EXPECT_EQ(StrikesAfterBlame(nullptr, 7), 0);
  const ReadmitRecord back_in_7{2, 7};
  EXPECT_EQ(StrikesAfterBlame(&back_in_7, 7), 3);
  EXPECT_EQ(StrikesAfterBlame(&back_in_7, 8), 0) << "a later generation failed: not its return";
  const ReadmitRecord not_back{2, 0};
  EXPECT_EQ(StrikesAfterBlame(&not_back, 7), 0);
  const ReadmitRecord at_cap{kMaxReadmitStrikes, 7};
  EXPECT_EQ(StrikesAfterBlame(&at_cap, 7), kMaxReadmitStrikes);
}

class SitesApartTest : public ::testing::Test {
 protected:
  void AddWorker(const std::string& id, const std::string& site) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(id);
    request.set_device_kind("cpu");
    (*request.mutable_labels())["site"] = site;
    UpsertWorker(state_, request, now_);
  }
  // Sites a and b with `per_site` workers each (a1, a2, ... b1, ...) and
  // `extra_b` more at b, all running job "j" in islands by site.
  void Start(int per_site, int extra_b = 0, bool islands = true) {
    for (int i = 1; i <= per_site; ++i) AddWorker("a" + std::to_string(i), "a");
    for (int i = 1; i <= per_site + extra_b; ++i) AddWorker("b" + std::to_string(i), "b");
    v1::JobSpec spec;
    spec.set_min_workers(1);
    spec.set_max_workers(2 * per_site + extra_b);
    spec.set_device(v1::DEVICE_CPU);
    spec.set_restart_budget(3);
    spec.mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
    if (islands) spec.mutable_sync()->set_islands_by("site");
    ChangeSet changes;
    AddPendingJob(state_, "j", spec, now_, &changes);
    Schedule(state_, now_);
    ASSERT_EQ(Job().generation.members.size(), static_cast<size_t>(2 * per_site + extra_b));
    BeatAll();
  }
  const JobRecord& Job() { return state_.jobs.at("j"); }
  // Every worker heartbeats, its trainer running job "j" (none exits).
  void BeatAll() {
    for (const auto& [id, worker] : state_.workers) {
      v1::HeartbeatRequest request;
      request.set_worker_id(id);
      request.add_running_jobs("j");
      ApplyHeartbeat(state_, request, now_);
    }
  }
  ChangeSet Advance() {
    GenerationOptions options;
    options.lease_seconds = kLease;
    return AdvanceGenerations(state_, now_, options);
  }
  // `reporter` saw `blamed` not answer in the current generation; the
  // report says `roll_call` of it.
  // `blamed_by`: the member the reporter followed the blames from ("": none).
  absl::StatusOr<ChangeSet> Late(const std::string& reporter, const std::string& blamed,
                                 v1::PeerRollCall roll_call = v1::PEER_ROLL_CALL_ANSWERED,
                                 const std::string& blamed_by = "") {
    v1::ReportFailureRequest report;
    report.set_job_id("j");
    report.set_generation(Job().generation.number);
    report.set_worker_id(reporter);
    report.set_rank(Job().generation.RankOf(reporter));
    report.set_message("parameter averaging: peer did not answer in time");
    report.set_peer_fault(v1::PEER_FAULT_LATE);
    report.set_peer_rank(Job().generation.RankOf(blamed));
    report.set_step(25);
    report.set_peer_roll_call(roll_call);
    if (!blamed_by.empty()) report.set_peer_blamed_by(Job().generation.RankOf(blamed_by));
    return ApplyFailureReport(state_, report, now_);
  }
  // Every left-out trainer calls JoinGeneration again.
  void AllAnswer() {
    std::vector<std::string> ids;
    for (const auto& [id, member] : Job().unresponsive) ids.push_back(id);
    for (const std::string& id : ids) TrainerAnswered(state_, "j", id, now_);
  }
  // Upkeep; true when it asked the job to re-form to grow, which its rank 0
  // then does at its step boundary.
  bool AdvanceAndGrow() {
    Advance();
    if (Job().reform_requested_generation != Job().generation.number) return false;
    EXPECT_TRUE(ReformAtBoundary(state_, "j", Job().generation.members.at(0), Job().generation.number, now_).ok());
    BeatAll();
    return true;
  }
  void Commit(int64_t step) {
    v1::ReportProgressRequest report;
    report.set_job_id("j");
    report.set_generation(Job().generation.number);
    report.set_rank(0);
    report.set_step(step);
    ChangeSet changes;
    ApplyProgress(state_, report, now_, &changes);
  }
  // Steps time in tenths of a lease, running upkeep with every trainer
  // answering, until the job grows; the seconds that took (-1: not within
  // `limit` seconds).
  double SecondsUntilGrown(double limit) {
    const double from = now_;
    while (now_ - from <= limit) {
      AllAnswer();
      if (AdvanceAndGrow()) return now_ - from;
      now_ += kLease / 10;
    }
    return -1;
  }

  ClusterState state_;
  double now_ = 1000;
};

// Without islands, or inside one, a late blame leaves out the blamed
// member alone, whoever reports.
TEST_F(SitesApartTest, WithinAnIslandOnlyTheBlamedMemberIsLeftOut) {
  Start(2);
  EXPECT_THAT(LeftOutForLateBlame(state_, Job(), "a1", "a2", v1::PEER_ROLL_CALL_ANSWERED).left_out, ElementsAre("a2"));
  EXPECT_EQ(LeftOutForLateBlame(state_, Job(), "a1", "a2", v1::PEER_ROLL_CALL_ANSWERED).unreachable_from, "");
}

TEST_F(SitesApartTest, WithoutIslandsOnlyTheBlamedMemberIsLeftOut) {
  Start(2, 0, /*islands=*/false);
  EXPECT_THAT(LeftOutForLateBlame(state_, Job(), "a1", "b1", v1::PEER_ROLL_CALL_ANSWERED).left_out, ElementsAre("b1"));
}

// Across islands a whole island goes, the same one whoever reports first:
// of two equal islands the one without generation rank 0; else the smaller.
TEST_F(SitesApartTest, AcrossIslandsTheSameWholeIslandGoesWhoeverReports) {
  Start(2);
  ASSERT_EQ(Job().generation.RankOf("a1"), 0);
  for (const auto& [reporter, blamed] : {std::pair<std::string, std::string>{"a1", "b1"}, {"b1", "a1"}, {"b2", "a2"}}) {
    const LateBlameOutcome outcome = LeftOutForLateBlame(state_, Job(), reporter, blamed, v1::PEER_ROLL_CALL_ANSWERED);
    EXPECT_THAT(outcome.left_out, ElementsAre("b1", "b2")) << reporter;
    EXPECT_EQ(outcome.unreachable_from, "a") << reporter;
  }
}

// A report from before the roll call (no answer known) keeps the cut-link
// rule.
TEST_F(SitesApartTest, AcrossIslandsAReportWithoutARollCallSendsAWholeIsland) {
  Start(2);
  EXPECT_THAT(LeftOutForLateBlame(state_, Job(), "b2", "a2", v1::PEER_ROLL_CALL_UNKNOWN).left_out,
              ElementsAre("b1", "b2"));
}

// A blamed peer in another island that did not answer the roll call hangs:
// it goes alone, whichever island is smaller or holds rank 0, and is shown
// as hung (no island it was unreachable from).
TEST_F(SitesApartTest, AcrossIslandsAPeerThatDidNotAnswerTheRollCallGoesAlone) {
  Start(2, /*extra_b=*/1);
  for (const auto& [reporter, blamed] : {std::pair<std::string, std::string>{"b2", "a2"}, {"a1", "b3"}, {"b1", "a1"}}) {
    const LateBlameOutcome outcome = LeftOutForLateBlame(state_, Job(), reporter, blamed, v1::PEER_ROLL_CALL_SILENT);
    EXPECT_THAT(outcome.left_out, ElementsAre(blamed)) << reporter;
    EXPECT_EQ(outcome.unreachable_from, "") << reporter;
  }
}

// Sites cut apart, a report that followed the blames to its own
// island-mate: b1 blamed a1 across the cut, a1 blamed b2 and b2 blamed a1
// (both alive). The link that failed is a1's and b2's, so a whole island
// goes (b, without rank 0), not b2 alone, which would leave b1 cut off in
// the next generation.
TEST_F(SitesApartTest, AFollowedBlameThatEndsAtAnIslandMateStillPartsTheSites) {
  Start(2);
  ASSERT_EQ(Job().generation.RankOf("a1"), 0);
  ASSERT_TRUE(Late("b1", "b2", v1::PEER_ROLL_CALL_ANSWERED, /*blamed_by=*/"a1").ok());
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2"));
  ASSERT_THAT(Job().info.unresponsive(), SizeIs(2));
  EXPECT_EQ(Job().info.unresponsive(0).unreachable_from(), "a");
}

// Two sites of two, a2 (in rank 0's island) hangs in a cross-site round:
// its round partner b2 blames it first. The healthy site b stays; the next
// generation is without a2 alone, and a2 comes back once its trainer
// answers and its back-off is over.
TEST_F(SitesApartTest, AHungRankBlamedAcrossIslandsLeavesAloneAndTheOtherIslandStays) {
  Start(2);
  ASSERT_EQ(Job().generation.RankOf("a1"), 0);
  ASSERT_TRUE(Late("b2", "a2", v1::PEER_ROLL_CALL_SILENT).ok());
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "b1", "b2"));
  ASSERT_THAT(Job().info.unresponsive(), SizeIs(1));
  EXPECT_EQ(Job().info.unresponsive(0).worker_id(), "a2");
  EXPECT_EQ(Job().info.unresponsive(0).unreachable_from(), "");
  Advance();
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "b1", "b2")) << "not taken back while hung";
  EXPECT_GT(SecondsUntilGrown(100 * kLease), 0);
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2", "b1", "b2"));
}

TEST_F(SitesApartTest, AcrossIslandsOfUnequalSizeTheSmallerGoes) {
  Start(1, /*extra_b=*/1);
  EXPECT_THAT(LeftOutForLateBlame(state_, Job(), "b2", "a1", v1::PEER_ROLL_CALL_ANSWERED).left_out, ElementsAre("a1"));
  EXPECT_EQ(LeftOutForLateBlame(state_, Job(), "a1", "b2", v1::PEER_ROLL_CALL_ANSWERED).unreachable_from, "b");
}

// The sites still reach the coordinator but not each other. The first
// failed round leaves site b out (it holds rank 2, not 0); its trainers
// answer at once but it stays out a lease, then a back-off that doubles
// each time its return fails again, whichever side reports; none of those
// retries spends restart budget. Once the link is back and a generation
// with both sites commits, the back-off starts from one lease again.
TEST_F(SitesApartTest, SitesThatReachTheCoordinatorButNotEachOtherDoNotFlap) {
  Start(2);
  ASSERT_TRUE(Late("b1", "a1").ok());  // b1 reports first: still site b goes
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2"));
  EXPECT_EQ(Job().restarts_used, 1);
  ASSERT_THAT(Job().info.unresponsive(), SizeIs(2));
  EXPECT_EQ(Job().info.unresponsive(0).worker_id(), "b1");
  EXPECT_EQ(Job().info.unresponsive(0).rank(), 2);
  EXPECT_EQ(Job().info.unresponsive(0).unreachable_from(), "a");
  AllAnswer();
  Advance();
  ASSERT_THAT(Job().info.unresponsive(), SizeIs(2)) << "answered at once, still within its back-off";
  EXPECT_TRUE(Job().info.unresponsive(0).answered());
  EXPECT_EQ(Job().info.unresponsive(0).backoff_seconds(), kLease);
  EXPECT_THAT(IdleWorkersFor(state_, "j", Job().info.spec()), IsEmpty());

  // Each return fails at its first round; the wait before the next doubles.
  double wait = SecondsUntilGrown(100 * kLease);
  for (double expected : {kLease, 2 * kLease, 4 * kLease, 8 * kLease, 16 * kLease, 16 * kLease}) {
    EXPECT_NEAR(wait, expected, kLease / 10 + 1e-9);
    EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2", "b1", "b2"));
    // Either side may report first: the side that came back goes again.
    ASSERT_TRUE(Late(expected == 2 * kLease ? "b2" : "a1", expected == 2 * kLease ? "a2" : "b1").ok());
    EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2"));
    EXPECT_EQ(Job().restarts_used, 1) << "a failed return is paid by the back-off";
    wait = SecondsUntilGrown(100 * kLease);
  }
  // The link is back: the next return commits a step, and the records go.
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "a2", "b1", "b2"));
  Commit(Job().generation.start_step);
  EXPECT_THAT(Job().readmit, SizeIs(2)) << "a commit at the start step trained nothing";
  Commit(Job().generation.start_step + 5);
  EXPECT_THAT(Job().readmit, IsEmpty());
  // Cut again: one lease, as the first time.
  ASSERT_TRUE(Late("a2", "b2").ok());
  EXPECT_EQ(Job().restarts_used, 2);
  EXPECT_NEAR(SecondsUntilGrown(100 * kLease), kLease, kLease / 10 + 1e-9);
}

// After a failure elsewhere (a hung rank inside site a) the islands are no
// longer the ones that came back: the smaller island goes, and site b's
// back-off earns no strike.
TEST_F(SitesApartTest, ABlameAfterAFailureElsewhereEarnsNoStrike) {
  Start(2);
  ASSERT_TRUE(Late("a1", "b1").ok());
  EXPECT_GT(SecondsUntilGrown(100 * kLease), 0);
  ASSERT_TRUE(Late("a1", "a2").ok());
  EXPECT_THAT(Job().generation.members, ElementsAre("a1", "b1", "b2"));
  ASSERT_TRUE(Late("b1", "a1").ok());
  EXPECT_THAT(Job().generation.members, ElementsAre("b1", "b2"));
  EXPECT_EQ(Job().unresponsive.at("a1").unreachable_from(), "b");
  EXPECT_EQ(Job().readmit.at("a1").strikes, 0);
  EXPECT_EQ(Job().readmit.at("b1").strikes, 0);
}

}  // namespace
}  // namespace herd::coordinator
