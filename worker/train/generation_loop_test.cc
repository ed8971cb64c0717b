// JoinWithin: a coordinator that cannot be reached for a moment costs
// retries, not the trainer; only the timeout ends the wait. JoinAfter: the
// next generation after one that ended.
#include "worker/train/generation_loop.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

namespace herd {
namespace {

// Answers JoinGeneration from a script of statuses; the rest is unused.
class ScriptedLink : public CoordinatorLink {
 public:
  explicit ScriptedLink(std::deque<absl::StatusOr<v1::JoinGenerationResponse>> script) : script_(std::move(script)) {}
  const std::string& job_id() const override { return id_; }
  const std::string& worker_id() const override { return id_; }
  absl::StatusOr<v1::JoinGenerationResponse> JoinGeneration(std::chrono::milliseconds, int64_t, bool) override {
    ++calls;
    if (script_.size() > 1) {
      auto next = script_.front();
      script_.pop_front();
      return next;
    }
    return script_.front();  // the last answer repeats
  }
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(const v1::ReportProgressRequest&) override {
    return absl::UnimplementedError("unused");
  }
  absl::StatusOr<v1::CommitCheckpointResponse> CommitCheckpoint(const v1::CommitCheckpointRequest&) override {
    return absl::UnimplementedError("unused");
  }
  absl::Status ReportFailure(const v1::ReportFailureRequest&) override { return absl::UnimplementedError("unused"); }
  std::shared_ptr<RendezvousStore> KvStore(int64_t) override { return nullptr; }

  int calls = 0;

 private:
  const std::string id_ = "test";
  std::deque<absl::StatusOr<v1::JoinGenerationResponse>> script_;
};

v1::JoinGenerationResponse Generation(int64_t generation) {
  v1::JoinGenerationResponse join;
  join.set_generation(generation);
  return join;
}

TEST(JoinWithin, UnreachableCoordinatorIsRetriedUntilItAnswers) {
  ScriptedLink link({absl::UnavailableError("connection attempt timed out"), absl::UnavailableError("still down"),
                     Generation(4)});
  auto joined = JoinWithin(&link, std::chrono::seconds(30));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->generation(), 4);
  EXPECT_EQ(link.calls, 3);
}

TEST(JoinWithin, UnreachableCoordinatorFailsOnlyAtTheTimeout) {
  ScriptedLink link({absl::UnavailableError("down")});
  const auto start = std::chrono::steady_clock::now();
  auto joined = JoinWithin(&link, std::chrono::milliseconds(700));
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(link.calls, 2);
  // It gave up near the timeout, not at the first refusal.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
}

TEST(JoinWithin, OtherErrorsEndTheWaitAtOnce) {
  ScriptedLink link({absl::PermissionDeniedError("not a member of this job")});
  auto joined = JoinWithin(&link, std::chrono::seconds(30));
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(link.calls, 1);
}

// A coordinator whose answer to joins may still show the failed generation:
// a join for "the current one" (after_generation 0) gets `current`, one
// for a generation after it gets `next`. Reports are answered from a script.
class MovingOnLink : public ScriptedLink {
 public:
  MovingOnLink(int64_t current, int64_t next, std::deque<absl::Status> reports)
      : ScriptedLink({Generation(current)}), current_(current), next_(next), reports_(std::move(reports)) {}
  absl::StatusOr<v1::JoinGenerationResponse> JoinGeneration(std::chrono::milliseconds, int64_t after,
                                                             bool) override {
    afters.push_back(after);
    return Generation(after >= current_ ? next_ : current_);
  }
  absl::Status ReportFailure(const v1::ReportFailureRequest&) override {
    ++reported;
    absl::Status answer = reports_.front();
    if (reports_.size() > 1) reports_.pop_front();
    return answer;
  }

  std::vector<int64_t> afters;
  int reported = 0;

 private:
  const int64_t current_;
  const int64_t next_;
  std::deque<absl::Status> reports_;
};

const GenerationResult kTimedOut =
    GenerationResult::Of(absl::DeadlineExceededError("all-reduce: rank 1 did not answer in time"));

TEST(JoinAfter, AFailureTheCoordinatorHeardWaitsForANewerGenerationNotTheOneThatFailed) {
  ASSERT_EQ(kTimedOut.outcome, GenerationOutcome::kGenerationFailed);
  MovingOnLink link(/*current=*/1, /*next=*/2, {absl::OkStatus()});
  auto joined = JoinAfter(&link, Generation(1), kTimedOut, 5, /*reported=*/true, std::chrono::seconds(30));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->generation(), 2);
  EXPECT_EQ(link.afters, std::vector<int64_t>({1})) << "one join, for a generation after the failed one";
  EXPECT_EQ(link.reported, 0) << "reported once already";
}

TEST(JoinAfter, AReportNotYetHeardIsSentAgainAndOnlyThenTheJoinWaitsForANewerGeneration) {
  MovingOnLink link(/*current=*/1, /*next=*/2, {absl::UnavailableError("coordinator restarting"), absl::OkStatus()});
  auto joined = JoinAfter(&link, Generation(1), kTimedOut, 5, /*reported=*/false, std::chrono::seconds(30));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->generation(), 2);
  // Unheard, the join asks for the current generation (the failed one: the
  // coordinator has not moved on), and the report goes again.
  EXPECT_EQ(link.afters, std::vector<int64_t>({0, 1}));
  EXPECT_EQ(link.reported, 2);
}

}  // namespace
}  // namespace herd
