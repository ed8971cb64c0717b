#include "worker/train/generation/roll_call.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "worker/comm/in_memory_store.h"
#include "worker/comm/peer_fault.h"
#include "worker/comm/testing/ending_store.h"
#include "worker/train/generation/waiting_mark.h"

namespace herd {
namespace {

using std::chrono::milliseconds;

const absl::Status kGlooTimeout = absl::DeadlineExceededError("all-reduce: Timed out waiting 5000ms for recv");
const absl::Status kGlooClosed = absl::UnavailableError("all-reduce: Connection closed by peer");

TEST(RollCallWait, AQuarterOfTheCollectiveTimeoutAtMostTwoSeconds) {
  EXPECT_EQ(RollCallWait(milliseconds(5000)), milliseconds(1250));
  EXPECT_EQ(RollCallWait(milliseconds(30000)), milliseconds(2000));
  EXPECT_EQ(RollCallWait(milliseconds(400)), milliseconds(100));
}

TEST(NeedsRollCall, ATimeoutOrAClosedConnectionThatBlamesNobodyAmongSeveralRanks) {
  EXPECT_TRUE(NeedsRollCall(kGlooTimeout, 3));
  EXPECT_TRUE(NeedsRollCall(WithContext(kGlooTimeout, "gradient sync at step 9: "), 2));
  EXPECT_TRUE(NeedsRollCall(kGlooClosed, 3));
  EXPECT_FALSE(NeedsRollCall(kGlooTimeout, 1)) << "nobody to call";
  // herd's TCP mesh and shared memory name the peer: no roll call, no wait.
  EXPECT_FALSE(NeedsRollCall(PeerLateError(2, "rank 2 did not answer in time"), 3));
  EXPECT_FALSE(NeedsRollCall(PeerClosedError(2), 3));
  // An echo of an earlier failure on a broken communicator: that failure
  // was the one to resolve.
  EXPECT_FALSE(NeedsRollCall(absl::AbortedError("the communicator is broken by an earlier failure"), 3));
}

TEST(RankToBlame, AfterATimeoutTheLowestRankThatDidNotAnswerOtherThanItself) {
  EXPECT_EQ(RankToBlame(4, 0, {0, 1, 2, 3}, true), std::nullopt);
  EXPECT_EQ(RankToBlame(4, 0, {0, 2}, true), 1);
  EXPECT_EQ(RankToBlame(4, 1, {3, 1, 0}, true), 2) << "answers in any order";
  EXPECT_EQ(RankToBlame(3, 2, {0, 1}, true), std::nullopt) << "it never blames itself";
  EXPECT_EQ(RankToBlame(3, 0, {0}, true), 1);
  EXPECT_EQ(RankToBlame(1, 0, {0}, true), std::nullopt);
}

TEST(RankToBlame, AfterAClosedConnectionOnlyASoleAbsentRank) {
  EXPECT_EQ(RankToBlame(4, 0, {0, 1, 2, 3}, false), std::nullopt);
  EXPECT_EQ(RankToBlame(4, 0, {0, 1, 3}, false), 2);
  EXPECT_EQ(RankToBlame(4, 3, {3, 0, 1}, false), 2);
  // Ranks still blocked behind this one cannot answer yet: ambiguous.
  EXPECT_EQ(RankToBlame(4, 0, {0, 2}, false), std::nullopt);
  EXPECT_EQ(RankToBlame(3, 0, {0}, false), std::nullopt);
}

// BlameByRollCall for ranks `ranks` of `world_size` at once, as the ranks
// that timed out in one collective do.
std::vector<absl::Status> RollCallOf(RendezvousStore& store, const std::vector<int>& ranks, int world_size,
                                     milliseconds wait, const absl::Status& failure = kGlooTimeout) {
  std::vector<absl::Status> reported(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      reported[i] = BlameByRollCall(failure, store, 7, ranks[i], world_size, wait);
    });
  }
  for (auto& thread : threads) thread.join();
  return reported;
}

TEST(BlameByRollCall, TheRankThatDidNotAnswerIsBlamedAsLateByEverySurvivor) {
  InMemoryStore store;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<absl::Status> reported = RollCallOf(store, {0, 1, 3}, 4, milliseconds(300));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300)) << "rank 2 had the whole deadline";
  for (const absl::Status& status : reported) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
    ASSERT_TRUE(PeerFaultOf(status).has_value()) << status;
    EXPECT_EQ(PeerFaultOf(status)->kind, PeerFaultKind::kLate);
    EXPECT_EQ(PeerFaultOf(status)->rank, 2);
    EXPECT_NE(status.message().find("rank 2 did not answer the roll call within 0.30 s after: all-reduce: Timed out"),
              absl::string_view::npos)
        << status;
  }
}

TEST(BlameByRollCall, AfterAClosedConnectionASoleAbsentRankIsBlamedAsLate) {
  InMemoryStore store;
  for (const absl::Status& status : RollCallOf(store, {0, 1}, 3, milliseconds(100), kGlooClosed)) {
    ASSERT_TRUE(PeerFaultOf(status).has_value()) << status;
    EXPECT_EQ(PeerFaultOf(status)->kind, PeerFaultKind::kLate);
    EXPECT_EQ(PeerFaultOf(status)->rank, 2);
  }
  // Two absent: one may only wait behind this rank. Nobody is blamed.
  InMemoryStore alone;
  EXPECT_EQ(BlameByRollCall(kGlooClosed, alone, 7, 0, 3, milliseconds(100)), kGlooClosed);
}

TEST(BlameByRollCall, WhenEveryRankAnswersNobodyIsBlamedAndNobodyWaitsOutTheDeadline) {
  InMemoryStore store;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<absl::Status> reported = RollCallOf(store, {0, 1, 2}, 3, milliseconds(60000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(30000));
  for (const absl::Status& status : reported) {
    EXPECT_EQ(status, kGlooTimeout);
    EXPECT_FALSE(PeerFaultOf(status).has_value());
  }
}

TEST(BlameByRollCall, AFailureThatNamesItsPeerIsReportedAsItIsWithoutARollCall) {
  EndingStore store;
  const absl::Status late = PeerLateError(1, "rank 1 did not answer in time");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(BlameByRollCall(late, store, 7, 0, 3, milliseconds(60000)), late);
  EXPECT_EQ(BlameByRollCall(PeerClosedError(2), store, 7, 0, 3, milliseconds(60000)), PeerClosedError(2));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(30000));
  std::string value;
  EXPECT_EQ(store.Get(RollCallKey(0), milliseconds(0), &value).code(), absl::StatusCode::kDeadlineExceeded)
      << "rank 0 answered a roll call nobody called";
  EXPECT_EQ(store.reads(RollCallKey(1)), 0);
}

TEST(BlameByRollCall, AHungRankThatWakesWhileTheOthersWaitBlamesNobodyAndNorDoThey) {
  InMemoryStore store;
  std::vector<absl::Status> survivors;
  std::thread waiting([&] { survivors = RollCallOf(store, {0, 1}, 3, milliseconds(60000)); });
  // Rank 2 wakes once both survivors have answered and wait for it.
  std::string value;
  ASSERT_TRUE(store.Get(RollCallKey(0), milliseconds(60000), &value).ok());
  ASSERT_TRUE(store.Get(RollCallKey(1), milliseconds(60000), &value).ok());
  const absl::Status woken = BlameByRollCall(kGlooTimeout, store, 7, 2, 3, milliseconds(60000));
  waiting.join();
  EXPECT_FALSE(PeerFaultOf(woken).has_value()) << woken;
  ASSERT_EQ(survivors.size(), 2u);
  for (const absl::Status& status : survivors) EXPECT_FALSE(PeerFaultOf(status).has_value()) << status;
}

TEST(BlameByRollCall, AHungRankThatWakesAfterTheGenerationEndedReportsWithoutBlame) {
  EndingStore store;
  const std::vector<absl::Status> survivors = RollCallOf(store, {0, 1}, 3, milliseconds(100));
  for (const absl::Status& status : survivors) EXPECT_EQ(PeerFaultOf(status)->rank, 2);
  store.End();  // the survivors' report ended the generation
  const absl::Status woken = BlameByRollCall(kGlooTimeout, store, 7, 2, 3, milliseconds(60000));
  EXPECT_EQ(woken, kGlooTimeout);
}

TEST(CallTheRoll, AGenerationThatEndsDuringTheWaitEndsTheRollCall) {
  EndingStore store;
  std::thread ender([&] {
    // Once rank 0 waits for rank 1's answer, a peer's report ends the generation.
    while (store.reads(RollCallKey(1)) == 0) std::this_thread::yield();
    store.End();
  });
  // The in-memory store does not wake a waiter when it ends: the wait is
  // short, and the generation is gone by the next read.
  const RollCallAnswers answers = CallTheRoll(store, 0, 3, milliseconds(200));
  ender.join();
  EXPECT_EQ(answers.status.code(), absl::StatusCode::kFailedPrecondition) << answers.status;
}

// Rank `rank` answering `answer` once rank `after` has answered: a live
// rank that reaches the failed collective while another holds its roll call.
std::thread AnswerOnceAnswered(RendezvousStore& store, int rank, std::string answer, int after) {
  return std::thread([&store, rank, answer = std::move(answer), after] {
    std::string value;
    ASSERT_TRUE(store.Get(RollCallKey(after), milliseconds(60000), &value).ok());
    ASSERT_TRUE(store.Set(RollCallKey(rank), answer).ok());
  });
}

// Waiting marks (waiting_mark.h): rank `rank`'s mark up, or cleared.
void Mark(RendezvousStore& store, int rank, bool waiting = true) {
  ASSERT_TRUE(store.Set(WaitingMarkKey(rank), waiting ? kWaitingMark : kMovingMark).ok());
}

TEST(BlameByRollCall, WithMarksAfterATimeoutTheRankNotWaitingIsBlamedAtOnceAndTheWaitingOnesNot) {
  InMemoryStore store;
  Mark(store, 0);
  Mark(store, 1);
  Mark(store, 3);
  const auto start = std::chrono::steady_clock::now();
  // Ranks 1 and 3 have not answered yet: their marks say they are alive.
  const absl::Status reported = BlameByRollCall(kGlooTimeout, store, 7, 0, 4, milliseconds(60000), /*marks=*/true);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(30000)) << "it waited out the deadline";
  ASSERT_TRUE(PeerFaultOf(reported).has_value()) << reported;
  EXPECT_EQ(PeerFaultOf(reported)->rank, 2) << reported;
  EXPECT_EQ(LatePeerAnswered(reported), false);
  EXPECT_NE(reported.message().find("rank 2 did not answer the roll call and was not waiting on its peers after: "
                                    "all-reduce: Timed out"),
            absl::string_view::npos)
      << reported;
  // A mark cleared ("moving": it waited once, then moved on) is no
  // evidence now.
  InMemoryStore moved;
  Mark(moved, 1, /*waiting=*/false);
  Mark(moved, 2);
  const absl::Status stale = BlameByRollCall(kGlooTimeout, moved, 7, 0, 3, milliseconds(60000), /*marks=*/true);
  ASSERT_TRUE(PeerFaultOf(stale).has_value()) << stale;
  EXPECT_EQ(PeerFaultOf(stale)->rank, 1) << stale;
  // With every other rank waiting or answered, nobody.
  InMemoryStore all;
  Mark(all, 1);
  Mark(all, 2);
  EXPECT_EQ(BlameByRollCall(kGlooTimeout, all, 7, 0, 3, milliseconds(60000), /*marks=*/true), kGlooTimeout);
}

TEST(BlameByRollCall, WithMarksSeveralRanksNeitherAnsweredNorWaitingAreWaitedForAndOnlyTheSilentOneBlamed) {
  InMemoryStore store;
  // Rank 1 lags (a checkpoint's save) and answers once it reaches the
  // failed collective; rank 2 hangs. Neither posted a mark.
  Mark(store, 3);
  std::thread rank1 = AnswerOnceAnswered(store, 1, "here", 0);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status reported = BlameByRollCall(kGlooTimeout, store, 7, 0, 4, milliseconds(60000), /*marks=*/true);
  rank1.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(30000))
      << "it waited out the deadline once only rank 2 was left";
  ASSERT_TRUE(PeerFaultOf(reported).has_value()) << reported;
  EXPECT_EQ(PeerFaultOf(reported)->rank, 2) << reported << ": the lagging rank 1 was blamed";
}

TEST(BlameByRollCall, WithMarksAfterAClosedConnectionTheDeadRankIsBlamedOnceTheLiveOnesAnswered) {
  InMemoryStore store;
  // Rank 3 died: its connections closed. Rank 1 began its collective as it
  // broke (no mark) and answers once rank 0 has; rank 2 is waiting.
  Mark(store, 2);
  std::thread rank1 = AnswerOnceAnswered(store, 1, "here", 0);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status reported = BlameByRollCall(kGlooClosed, store, 7, 0, 4, milliseconds(60000), /*marks=*/true);
  rank1.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(30000)) << "it waited out the deadline";
  ASSERT_TRUE(PeerFaultOf(reported).has_value()) << reported;
  EXPECT_EQ(PeerFaultOf(reported)->rank, 3) << reported << ": rank 1 was blamed before it could answer";
  // With two that never answer, nobody: one may be blocked behind this one.
  InMemoryStore two;
  Mark(two, 1);
  EXPECT_EQ(BlameByRollCall(kGlooClosed, two, 7, 0, 4, milliseconds(300), /*marks=*/true), kGlooClosed);
}

TEST(BlameByRollCall, ARankItBlamesDidNotAnswer) {
  InMemoryStore store;
  for (const absl::Status& status : RollCallOf(store, {0, 1}, 3, milliseconds(100))) {
    EXPECT_EQ(LatePeerAnswered(status), false) << status;
  }
}

TEST(RollCallAnswer, NamesWhomItBlamesOrSaysHere) {
  EXPECT_EQ(RollCallAnswer(std::nullopt), "here");
  EXPECT_EQ(RollCallAnswer(3), "blames 3");
  EXPECT_EQ(BlamedByAnswer(RollCallAnswer(3), 4), 3);
  EXPECT_EQ(BlamedByAnswer("here", 4), std::nullopt);
  EXPECT_EQ(BlamedByAnswer("blames 4", 4), std::nullopt) << "no such rank";
  EXPECT_EQ(BlamedByAnswer("blames -1", 4), std::nullopt);
  EXPECT_EQ(BlamedByAnswer("blames x", 4), std::nullopt);
}

TEST(FollowBlames, WaitsForTheBlamedRankThenBlamesItAsSilentWhenItDidNotAnswer) {
  BlamePath path = FollowBlames(0, 1, {}, {});
  EXPECT_EQ(path.wait_for, 1);
  path = FollowBlames(0, 1, {}, {1});
  EXPECT_EQ(path.wait_for, std::nullopt);
  EXPECT_EQ(path.blamed, 1);
  EXPECT_FALSE(path.answered);
}

// Sites {0, 1} and {2, 3}, rank 1 hung: rank 2 blamed its island-mate 3,
// which waits for rank 1 in their round.
TEST(FollowBlames, FollowsAnsweringRanksToTheOneThatHangs) {
  EXPECT_EQ(FollowBlames(2, 3, {{3, 1}}, {}).wait_for, 1);
  const BlamePath path = FollowBlames(2, 3, {{3, 1}}, {1});
  EXPECT_EQ(path.wait_for, std::nullopt);
  EXPECT_EQ(path.blamed, 1);
  EXPECT_FALSE(path.answered);
  EXPECT_EQ(path.blamed_by, 3);
}

TEST(FollowBlames, ACutLinkEndsAtTheAnsweringRankThatBlamesOneOnThePath) {
  // The two sides blame each other.
  BlamePath path = FollowBlames(0, 2, {{2, 0}}, {});
  EXPECT_EQ(path.wait_for, std::nullopt);
  EXPECT_EQ(path.blamed, 2);
  EXPECT_TRUE(path.answered);
  EXPECT_EQ(path.blamed_by, 0);
  // Rank 0 waits behind its island-mate 1, whose round partner 3 is cut off.
  path = FollowBlames(0, 1, {{1, 3}, {3, 1}}, {});
  EXPECT_EQ(path.blamed, 3);
  EXPECT_TRUE(path.answered);
  EXPECT_EQ(path.blamed_by, 1);
  // Rank 2 blames 0 across the cut, 0 blames 2's island-mate 1 and 1 blames
  // 0: the path ends at 1, its own island, and the failed link is 0's and
  // 1's (what the coordinator parts the sites by).
  path = FollowBlames(2, 0, {{0, 1}, {1, 0}}, {});
  EXPECT_EQ(path.blamed, 1);
  EXPECT_TRUE(path.answered);
  EXPECT_EQ(path.blamed_by, 0);
  // An answer that blames nobody ends the path there.
  path = FollowBlames(0, 1, {{1, std::nullopt}}, {});
  EXPECT_EQ(path.blamed, 1);
  EXPECT_TRUE(path.answered);
  EXPECT_EQ(path.blamed_by, 0);
}

// FollowLateBlame for each (rank, blamed peer) at once, as ranks that fail
// within a collective timeout of each other do.
std::map<int, absl::Status> FollowedBy(RendezvousStore& store, const std::map<int, int>& blames, int world_size,
                                       milliseconds wait) {
  std::map<int, absl::Status> reported;
  for (const auto& [rank, peer] : blames) reported[rank] = absl::OkStatus();
  std::vector<std::thread> threads;
  for (const auto& [rank, peer] : blames) {
    threads.emplace_back([&, rank = rank, peer = peer] {
      reported[rank] = FollowLateBlame(PeerLateError(peer, "round: rank did not answer in time"), store, 7, rank,
                                       world_size, wait);
    });
  }
  for (auto& thread : threads) thread.join();
  return reported;
}

TEST(FollowLateBlame, EveryRankWaitingOnAHungRankDirectlyOrNotBlamesItAsSilent) {
  InMemoryStore store;
  // Rank 1 hangs: 3 waits for it in the round, 0 in the island's all-gather,
  // 2 for 3 in the all-gather.
  const std::map<int, absl::Status> reported = FollowedBy(store, {{3, 1}, {0, 1}, {2, 3}}, 4, milliseconds(300));
  for (const auto& [rank, status] : reported) {
    ASSERT_TRUE(PeerFaultOf(status).has_value()) << status;
    EXPECT_EQ(PeerFaultOf(status)->kind, PeerFaultKind::kLate) << rank;
    EXPECT_EQ(PeerFaultOf(status)->rank, 1) << rank << ": " << status;
    EXPECT_EQ(LatePeerAnswered(status), false) << rank;
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_NE(status.message().find("rank 1"), absl::string_view::npos) << status;
  }
  EXPECT_NE(reported.at(2).message().find("following the blames from rank 3"), absl::string_view::npos)
      << reported.at(2);
}

TEST(FollowLateBlame, ACutLinkFindsTheBlamedPeersAliveWithoutWaitingOutTheDeadline) {
  InMemoryStore store;
  const auto start = std::chrono::steady_clock::now();
  const std::map<int, absl::Status> reported =
      FollowedBy(store, {{0, 2}, {2, 0}, {1, 3}, {3, 1}}, 4, milliseconds(60000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(30000));
  const std::map<int, int> across = {{0, 2}, {2, 0}, {1, 3}, {3, 1}};
  for (const auto& [rank, status] : reported) {
    ASSERT_TRUE(PeerFaultOf(status).has_value()) << status;
    EXPECT_EQ(PeerFaultOf(status)->rank, across.at(rank)) << rank;
    EXPECT_EQ(LatePeerAnswered(status), true) << rank;
  }
}

TEST(FollowLateBlame, ACutLinkBehindAnIslandMateBlamesTheRankAcross) {
  InMemoryStore store;
  // Rank 0 waits for 1 in the island's all-gather; 1 and 3 are cut apart.
  const std::map<int, absl::Status> reported = FollowedBy(store, {{0, 1}, {1, 3}, {3, 1}}, 4, milliseconds(60000));
  EXPECT_EQ(PeerFaultOf(reported.at(0))->rank, 3) << reported.at(0);
  EXPECT_EQ(LatePeerAnswered(reported.at(0)), true);
  EXPECT_EQ(LatePeerBlamedBy(reported.at(0)), 1) << "the failed link is 1's and 3's";
  EXPECT_EQ(LatePeerBlamedBy(reported.at(1)), 1) << "its own";
}

TEST(FollowLateBlame, AFailureWithoutALatePeerOrAfterTheGenerationEndedIsReportedAsItIs) {
  EndingStore store;
  EXPECT_EQ(FollowLateBlame(PeerClosedError(2), store, 7, 0, 3, milliseconds(60000)), PeerClosedError(2));
  EXPECT_EQ(FollowLateBlame(kGlooTimeout, store, 7, 0, 3, milliseconds(60000)), kGlooTimeout);
  std::string value;
  EXPECT_EQ(store.Get(RollCallKey(0), milliseconds(0), &value).code(), absl::StatusCode::kDeadlineExceeded)
      << "answered without a late peer";
  store.End();
  const absl::Status late = PeerLateError(1, "round: rank 1 did not answer in time");
  const absl::Status reported = FollowLateBlame(late, store, 7, 0, 3, milliseconds(60000));
  EXPECT_EQ(reported, late);
  EXPECT_EQ(LatePeerAnswered(reported), std::nullopt);
}

TEST(FollowLateBlame, WithMarksAHungRankNotWaitingIsSilentAtOnceAndAWaitingOneIsWaitedFor) {
  InMemoryStore store;
  // Rank 1 hangs; 3 waited for it and answered; 2 blames 3.
  ASSERT_TRUE(store.Set(RollCallKey(3), RollCallAnswer(1)).ok());
  Mark(store, 3);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status reported = FollowLateBlame(PeerLateError(3, "all-gather: rank 3 did not answer in time"), store,
                                                7, 2, 4, milliseconds(60000), /*marks=*/true);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(30000)) << "it waited out the deadline";
  ASSERT_TRUE(PeerFaultOf(reported).has_value()) << reported;
  EXPECT_EQ(PeerFaultOf(reported)->rank, 1) << reported;
  EXPECT_EQ(LatePeerAnswered(reported), false);
  EXPECT_NE(reported.message().find("did not answer the roll call and was not waiting on its peers"),
            absl::string_view::npos)
      << reported;

  // Rank 0 is waiting (its timeout fires a little after rank 2's): whom it
  // blames comes with its answer, which rank 2 waits for.
  InMemoryStore behind;
  Mark(behind, 0);
  std::thread rank0 = AnswerOnceAnswered(behind, 0, RollCallAnswer(2), 2);
  const absl::Status cut = FollowLateBlame(PeerLateError(0, "round: rank 0 did not answer in time"), behind, 7, 2, 4,
                                           milliseconds(60000), /*marks=*/true);
  rank0.join();
  ASSERT_TRUE(PeerFaultOf(cut).has_value()) << cut;
  EXPECT_EQ(PeerFaultOf(cut)->rank, 0) << cut;
  EXPECT_EQ(LatePeerAnswered(cut), true) << "a cut link: the two sides blame each other";
}

TEST(AnswerRollCall, SaysHereWithoutWaiting) {
  InMemoryStore store;
  AnswerRollCall(store, 7, 2);
  std::string value;
  ASSERT_TRUE(store.Get(RollCallKey(2), milliseconds(0), &value).ok());
  EXPECT_EQ(value, "here");
  // A rank that blamed 2 finds it alive.
  const absl::Status reported = FollowLateBlame(PeerLateError(2, "late"), store, 7, 0, 3, milliseconds(60000));
  EXPECT_EQ(PeerFaultOf(reported)->rank, 2);
  EXPECT_EQ(LatePeerAnswered(reported), true);
}

}  // namespace
}  // namespace herd
