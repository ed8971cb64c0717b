// JoinWithin: a coordinator that cannot be reached for a moment costs
// retries, not the trainer; only the timeout ends the wait.
#include "worker/train/generation_loop.h"

#include <gtest/gtest.h>

#include <deque>

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

}  // namespace
}  // namespace herd
