#include "coordinator/join_board.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"

namespace herd::coordinator {
namespace {

using Response = absl::StatusOr<v1::JoinGenerationResponse>;

// The whole response an async wait's answer stands for.
Response AsResponse(const absl::StatusOr<JoinAnswer>& answer) {
  if (!answer.ok()) return answer.status();
  return answer->Message();
}

// Collects the answers of async waits by name; each may come once.
class Answers {
 public:
  JoinBoard::Done For(const std::string& name) {
    return [this, name](absl::StatusOr<JoinAnswer> answer) {
      Response response = AsResponse(answer);
      absl::MutexLock lock(&mu_);
      EXPECT_EQ(answers_.count(name), 0u) << name << " was answered twice";
      answers_.emplace(name, std::move(response));
    };
  }
  // `name`'s answer, waiting up to 10 s for it.
  Response Of(const std::string& name) {
    absl::MutexLock lock(&mu_);
    auto there = [this, &name]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return answers_.count(name) > 0; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&there), absl::Seconds(10))) {
      return absl::InternalError(name + " got no answer in 10 s");
    }
    return answers_.at(name);
  }
  bool Has(const std::string& name) {
    absl::MutexLock lock(&mu_);
    return answers_.count(name) > 0;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, Response> answers_ ABSL_GUARDED_BY(mu_);
};

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
  Answers answers_;  // outlives the board, whose threads answer
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
  auto joined = board_.Await({"j", "a", 2, absl::ZeroDuration(), 0}, absl::Milliseconds(10), nullptr);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->rank(), 1);
  EXPECT_EQ(joined->generation(), 3);
  EXPECT_EQ(joined->seed(), 7u);
  EXPECT_EQ(joined->checkpoint_path(), "/ckpt/j/30");
  ASSERT_EQ(joined->peers_size(), 2);
  EXPECT_EQ(joined->peers(0).worker_id(), "b");

  // Already in generation 3, or not a member: it waits, and is told why.
  auto stale = board_.Await({"j", "a", 3, absl::ZeroDuration(), 0}, absl::Milliseconds(10), nullptr);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kDeadlineExceeded);
  auto outsider = board_.Await({"j", "c", 2, absl::ZeroDuration(), 5}, absl::Milliseconds(10), nullptr);
  EXPECT_EQ(outsider.status().message(), "worker c is not a member of job j generation 3 (waited 5 ms to be admitted)");
  EXPECT_EQ(board_.Await({"x", "a", 0, absl::ZeroDuration(), 0}, absl::Milliseconds(10), nullptr).status().code(),
            absl::StatusCode::kNotFound);
}

// The bytes a rank is sent (the shared answer as serialized once, then its
// own fields) parse as its whole response.
TEST_F(JoinBoardTest, TheSharedBytesAndARanksOwnFieldsParseAsItsResponse) {
  state_.checkpoints["j"].emplace_back().set_path("/ckpt/j/30");
  const JoinView view = JoinViewOf(state_, Job(), nullptr, false);
  ASSERT_NE(view.answer, nullptr);
  for (int64_t rank : {0, 1}) {
    const JoinAnswer answer{view.answer, rank, view.checkpoint_path};
    v1::JoinGenerationResponse sent;
    ASSERT_TRUE(sent.ParseFromString(view.answer->serialized + answer.OwnFields()));
    EXPECT_EQ(sent.rank(), rank);
    EXPECT_EQ(sent.checkpoint_path(), "/ckpt/j/30");
    EXPECT_EQ(sent.peers_size(), 2);
    EXPECT_EQ(sent.SerializeAsString(), answer.Message().SerializeAsString());
  }
  // Rank 0 without a checkpoint: both fields at their defaults.
  const JoinAnswer first{view.answer, 0, ""};
  v1::JoinGenerationResponse sent;
  ASSERT_TRUE(sent.ParseFromString(view.answer->serialized + first.OwnFields()));
  EXPECT_EQ(sent.SerializeAsString(), first.Message().SerializeAsString());
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
  auto joined = board_.Await({"j", "b", 2, absl::Seconds(60), 60000}, absl::Seconds(30), [&] {
    if (!waiting.HasBeenNotified()) waiting.Notify();
    return false;
  });
  publisher.join();
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->rank(), 0);

  std::thread stopper([&] { board_.Shutdown(); });
  auto stopped = board_.Await({"j", "c", 2, absl::Seconds(60), 60000}, absl::Seconds(30), nullptr);
  stopper.join();
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kUnavailable);

  Job().info.set_state(v1::CANCELLED);
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  EXPECT_EQ(board_.Await({"j", "b", 0, absl::ZeroDuration(), 0}, absl::Milliseconds(10), nullptr).status().message(),
            "job j is CANCELLED");
}

TEST_F(JoinBoardTest, WaitersHoldNoThreadAndThePublishThatFormsTheirGenerationAnswersThem) {
  Job().generation.formed = false;
  Job().info.set_state(v1::PENDING);
  Job().info.set_reason("waiting for 1 more worker");
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  for (const char* worker : {"a", "b", "c"}) {
    EXPECT_NE(board_.Wait({"j", worker, 2, absl::Seconds(60), 60000}, answers_.For(worker)), 0u);
  }
  EXPECT_EQ(board_.Waiting(), 3u);
  EXPECT_FALSE(answers_.Has("a"));

  // A change that does not form the generation answers no one.
  Job().info.set_reason("waiting for 2 more workers");
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  EXPECT_EQ(board_.Waiting(), 3u);

  Job().info.set_state(v1::RUNNING);
  Job().generation.formed = true;
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  Response a = answers_.Of("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rank(), 1);
  EXPECT_EQ(a->generation(), 3);
  Response b = answers_.Of("b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rank(), 0);
  // c is no member of generation 3: it waits on to be admitted.
  EXPECT_EQ(board_.Waiting(), 1u);
  EXPECT_FALSE(answers_.Has("c"));

  // The job ends: the waiting one hears why.
  Job().info.set_state(v1::FAILED);
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  EXPECT_EQ(answers_.Of("c").status(), absl::FailedPreconditionError("job j is FAILED"));
  EXPECT_EQ(board_.Waiting(), 0u);
}

TEST(JoinBoardDeadlines, ADeadlineFiresOnTheBoardsClockNamingWhatItWaitedFor) {
  ClusterState state;
  JobRecord& job = state.jobs["j"];
  job.info.set_id("j");
  job.info.set_state(v1::PENDING);
  job.info.set_reason("waiting for 2 more workers");
  FakeClock clock;
  Answers answers;
  JoinBoard board(2, &clock);
  board.Publish("j", JoinViewOf(state, job, nullptr, false));
  board.Wait({"j", "a", 0, absl::Seconds(5), 5000}, answers.For("a"));
  board.Wait({"j", "b", 0, absl::Seconds(9), 9000}, answers.For("b"));

  clock.Advance(4.9);
  board.FireDeadlines();
  EXPECT_EQ(board.Waiting(), 2u);
  clock.Advance(0.1);
  board.FireDeadlines();
  EXPECT_EQ(answers.Of("a").status(),
            absl::DeadlineExceededError("job j is still PENDING (waiting for 2 more workers) after waiting 5000 ms"));
  EXPECT_EQ(board.Waiting(), 1u);
  EXPECT_FALSE(answers.Has("b"));
}

TEST_F(JoinBoardTest, TheDeadlineThreadAnswersAShortRealWait) {
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  // Already in generation 3: waits for a newer one, which does not come.
  board_.Wait({"j", "a", 3, absl::Milliseconds(50), 50}, answers_.For("a"));
  const absl::Status expected = absl::DeadlineExceededError(
      "worker a is not a member of job j generation 3 (waited 50 ms to be admitted)");
  EXPECT_EQ(answers_.Of("a").status(), expected);
  EXPECT_EQ(board_.Waiting(), 0u);
}

TEST_F(JoinBoardTest, CancelAnswersAWaitingJoinOnceAndLeavesOthers) {
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  const JoinBoard::WaitId a = board_.Wait({"j", "a", 3, absl::Seconds(60), 60000}, answers_.For("a"));
  board_.Wait({"j", "b", 3, absl::Seconds(60), 60000}, answers_.For("b"));
  board_.Cancel(a);
  EXPECT_EQ(answers_.Of("a").status(), absl::CancelledError("the caller cancelled the join"));
  board_.Cancel(a);  // answered already: nothing more (Answers fails a second answer)
  EXPECT_EQ(board_.Waiting(), 1u);
  EXPECT_FALSE(answers_.Has("b"));
}

TEST_F(JoinBoardTest, ShutdownAnswersEveryWaiterAndDeliversWhatWasReadyBeforeReturning) {
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  board_.Wait({"j", "a", 2, absl::Seconds(60), 60000}, answers_.For("ready"));  // answered at once, on a thread
  board_.Wait({"j", "a", 3, absl::Seconds(60), 60000}, answers_.For("a"));
  board_.Wait({"j", "c", 2, absl::Seconds(60), 60000}, answers_.For("c"));
  board_.Shutdown();
  EXPECT_TRUE(answers_.Has("ready"));
  EXPECT_EQ(answers_.Of("a").status(), absl::UnavailableError("coordinator is shutting down"));
  EXPECT_EQ(answers_.Of("c").status(), absl::UnavailableError("coordinator is shutting down"));
  EXPECT_EQ(board_.Waiting(), 0u);
  // Later waits that would wait answer at once.
  EXPECT_EQ(board_.Wait({"j", "c", 2, absl::Seconds(60), 60000}, answers_.For("late")), 0u);
  EXPECT_EQ(answers_.Of("late").status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(JoinBoardTest, AnswersAreDeliveredOnTheBoardsAnswerThreadsOnly) {
  Job().generation.formed = false;
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  absl::Mutex mu;
  int copying = 0, most = 0, answered = 0;
  constexpr int kWaiters = 40;
  for (int i = 0; i < kWaiters; ++i) {
    board_.Wait({"j", i % 2 ? "a" : "b", 2, absl::Seconds(60), 60000}, [&](absl::StatusOr<JoinAnswer> response) {
      EXPECT_TRUE(response.ok()) << response.status();
      {
        absl::MutexLock lock(&mu);
        most = std::max(most, ++copying);
      }
      absl::SleepFor(absl::Milliseconds(2));  // long enough for the threads to overlap
      absl::MutexLock lock(&mu);
      --copying;
      ++answered;
    });
  }
  Job().generation.formed = true;
  board_.Publish("j", JoinViewOf(state_, Job(), nullptr, false));
  absl::MutexLock lock(&mu);
  auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered == kWaiters; };
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(10)));
  EXPECT_LE(most, 2);  // the fixture's board delivers on 2 threads
}

}  // namespace
}  // namespace herd::coordinator
