#include "coordinator/join_board.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/synchronization/notification.h"

namespace herd::coordinator {
namespace {

class JoinBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"a", "b", "c"}) {
      WorkerRecord& worker = state_.workers[id];
      worker.id = id;
      worker.address = std::string(id) + ".example:29500";
    }
    JobRecord& job = state_.jobs["j"];
    job.info.set_id("j");
    job.info.set_state(v1::RUNNING);
    job.info.mutable_spec()->set_seed(7);
    job.generation.number = 3;
    job.generation.members = {"b", "a"};
    job.generation.start_step = 40;
  }
  JobRecord& Job() { return state_.jobs.at("j"); }

  ClusterState state_;
  JoinBoard board_;
};

TEST_F(JoinBoardTest, OneAnswerPerGenerationRebuiltWhenItOrItsMembersChange) {
  const JoinView first = JoinViewOf(state_, Job(), nullptr, false);
  ASSERT_NE(first.answer, nullptr);
  EXPECT_EQ(first.answer->response.kv_prefix(), "j/3/");
  EXPECT_EQ(first.answer->response.start_step(), 40);
  EXPECT_EQ(first.answer->rank_of.at("a"), 1);

  Job().info.set_step(55);  // progress: the generation's answer stays
  const JoinView same = JoinViewOf(state_, Job(), &first, false);
  EXPECT_EQ(same.answer, first.answer);

  state_.workers.at("a").address = "a.elsewhere:29500";
  const JoinView moved = JoinViewOf(state_, Job(), &same, /*members_changed=*/true);
  ASSERT_NE(moved.answer, first.answer);
  EXPECT_EQ(moved.answer->response.peers(1).address(), "a.elsewhere:29500");

  Job().generation.number = 4;
  Job().generation.members = {"b", "a", "c"};
  const JoinView next = JoinViewOf(state_, Job(), &moved, false);
  ASSERT_NE(next.answer, moved.answer);
  EXPECT_EQ(next.answer->response.world_size(), 3);

  Job().info.set_state(v1::SUCCEEDED);
  EXPECT_EQ(JoinViewOf(state_, Job(), &next, false).answer, nullptr);
}

TEST_F(JoinBoardTest, AwaitAnswersEachMemberWithItsRankOnceTheGenerationIsNewer) {
  state_.checkpoints["j"].emplace_back().set_path("/ckpt/j/30");
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  auto joined = board_.Await("j", "a", 2, absl::Now(), 0, absl::Milliseconds(10), nullptr);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->rank(), 1);
  EXPECT_EQ(joined->generation(), 3);
  EXPECT_EQ(joined->seed(), 7u);
  EXPECT_EQ(joined->checkpoint_path(), "/ckpt/j/30");
  ASSERT_EQ(joined->peers_size(), 2);
  EXPECT_EQ(joined->peers(0).worker_id(), "b");

  // Already in generation 3, or not a member: it waits, and is told why.
  auto stale = board_.Await("j", "a", 3, absl::Now(), 0, absl::Milliseconds(10), nullptr);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kDeadlineExceeded);
  auto outsider = board_.Await("j", "c", 2, absl::Now(), 5, absl::Milliseconds(10), nullptr);
  EXPECT_EQ(outsider.status().message(), "worker c is not a member of job j generation 3 (waited 5 ms to be admitted)");
  EXPECT_EQ(board_.Await("x", "a", 0, absl::Now(), 0, absl::Milliseconds(10), nullptr).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JoinBoardTest, AWaitingJoinWakesOnPublishAndOnShutdown) {
  Job().generation.formed = false;
  Job().info.set_reason("waiting for 1 more worker");
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  absl::Notification waiting;
  std::thread publisher([&] {
    waiting.WaitForNotification();
    Job().generation.formed = true;
    board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  });
  auto joined = board_.Await("j", "b", 2, absl::Now() + absl::Seconds(60), 60000, absl::Seconds(30), [&] {
    if (!waiting.HasBeenNotified()) waiting.Notify();
    return false;
  });
  publisher.join();
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->rank(), 0);

  std::thread stopper([&] { board_.Shutdown(); });
  auto stopped = board_.Await("j", "c", 2, absl::Now() + absl::Seconds(60), 60000, absl::Seconds(30), nullptr);
  stopper.join();
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kUnavailable);

  Job().info.set_state(v1::CANCELLED);
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  EXPECT_EQ(board_.Await("j", "b", 0, absl::Now(), 0, absl::Milliseconds(10), nullptr).status().message(),
            "job j is CANCELLED");
}

}  // namespace
}  // namespace herd::coordinator
