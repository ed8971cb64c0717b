#include "worker/train/generation/waiting_mark.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

namespace herd {
namespace {

using std::chrono::milliseconds;
using Time = WaitingMarkState::Time;

const Time kStart = Time() + std::chrono::hours(1);
constexpr milliseconds kAfter{2500};

TEST(WaitingMarkAfter, HalfTheCollectiveTimeout) {
  EXPECT_EQ(WaitingMarkAfter(milliseconds(5000)), milliseconds(2500));
  EXPECT_EQ(WaitingMarkAfter(milliseconds(30000)), milliseconds(15000));
}

TEST(PostsWaitingMarks, CpuRanksAmongSeveral) {
  EXPECT_TRUE(PostsWaitingMarks(/*on_cuda=*/false, 3));
  EXPECT_FALSE(PostsWaitingMarks(/*on_cuda=*/false, 1)) << "nobody to wait on";
  EXPECT_FALSE(PostsWaitingMarks(/*on_cuda=*/true, 3)) << "a captured graph replays NCCL past the communicator";
}

TEST(NextWaitingMarkStep, AWaitIsMarkedOnceItLastedAfterAndNotBefore) {
  WaitingMarkState state;
  WaitingMarkStep step = NextWaitingMarkStep(state, kStart, kAfter);
  EXPECT_FALSE(step.post.has_value());
  EXPECT_EQ(step.wake, kStart + kAfter) << "with no wait, one `after` on: a wait begun meanwhile is seen in time";

  state.oldest_wait = kStart;
  step = NextWaitingMarkStep(state, kStart + milliseconds(2499), kAfter);
  EXPECT_FALSE(step.post.has_value());
  EXPECT_EQ(step.wake, kStart + kAfter);

  step = NextWaitingMarkStep(state, kStart + kAfter, kAfter);
  EXPECT_EQ(step.post, true);
}

TEST(NextWaitingMarkStep, APostedMarkStaysWhileTheWaitLastsAndIsClearedWhenItEnds) {
  WaitingMarkState state;
  state.oldest_wait = kStart;
  state.posted = true;
  WaitingMarkStep step = NextWaitingMarkStep(state, kStart + milliseconds(9000), kAfter);
  EXPECT_FALSE(step.post.has_value());
  EXPECT_EQ(step.wake, kStart + milliseconds(9000) + WaitingMarkRecheck(kAfter))
      << "looked at again soon: the long collective may finish unwaited";

  state.oldest_wait.reset();
  EXPECT_EQ(NextWaitingMarkStep(state, kStart + milliseconds(9000), kAfter).post, false);
  // A younger wait under way is not the long one that was marked.
  state.oldest_wait = kStart + milliseconds(8000);
  EXPECT_EQ(NextWaitingMarkStep(state, kStart + milliseconds(9000), kAfter).post, false);
}

TEST(NextWaitingMarkStep, APostTheCoordinatorDidNotTakeIsTriedAgainAfterAPause) {
  EXPECT_EQ(WaitingMarkRecheck(kAfter), milliseconds(625));
  WaitingMarkState state;
  state.oldest_wait = kStart;
  state.retry_at = kStart + milliseconds(3000);
  WaitingMarkStep step = NextWaitingMarkStep(state, kStart + milliseconds(2600), kAfter);
  EXPECT_FALSE(step.post.has_value());
  EXPECT_EQ(step.wake, kStart + milliseconds(3000));
  EXPECT_EQ(NextWaitingMarkStep(state, kStart + milliseconds(3000), kAfter).post, true);
  // Clearing too.
  state.posted = true;
  state.oldest_wait.reset();
  EXPECT_FALSE(NextWaitingMarkStep(state, kStart + milliseconds(2600), kAfter).post.has_value());
  EXPECT_EQ(NextWaitingMarkStep(state, kStart + milliseconds(3000), kAfter).post, false);
}

TEST(NextWaitingMarkStep, AfterAFailedWaitTheMarkStaysAsItIs) {
  WaitingMarkState state;
  state.failed = true;
  state.posted = true;
  WaitingMarkStep step = NextWaitingMarkStep(state, kStart, kAfter);
  EXPECT_FALSE(step.post.has_value()) << "the rank is alive and answers the roll call next";
  EXPECT_FALSE(step.wake.has_value());
  state.posted = false;
  state.oldest_wait = kStart;
  step = NextWaitingMarkStep(state, kStart + milliseconds(9000), kAfter);
  EXPECT_FALSE(step.post.has_value()) << "the generation is over for this rank";
}

// A store that keeps every Set in order and lets a test wait for them.
class RecordingStore : public RendezvousStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sets_.push_back(key + "=" + value);
    }
    changed_.notify_all();
    return absl::OkStatus();
  }
  absl::Status Get(const std::string&, milliseconds, std::string*) override {
    return absl::UnimplementedError("not read here");
  }
  // The Sets once there are `count` of them (all of them after 60 s).
  std::vector<std::string> AwaitSets(size_t count) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_for(lock, std::chrono::seconds(60), [&] { return sets_.size() >= count; });
    return sets_;
  }
  std::vector<std::string> sets() {
    std::lock_guard<std::mutex> lock(mu_);
    return sets_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> sets_;
};

TEST(WaitingMarker, ALongWaitIsMarkedAndClearedWhenItEndsWell) {
  auto store = std::make_shared<RecordingStore>();
  std::atomic<int> marked{0};
  {
    WaitingMarker marker(store, 2, milliseconds(20), [&] { ++marked; });
    const uint64_t wait = marker.Begin();
    EXPECT_EQ(store->AwaitSets(1), std::vector<std::string>({"waiting/2=waiting"}));
    marker.End(wait, /*ok=*/true);
    EXPECT_EQ(store->AwaitSets(2), std::vector<std::string>({"waiting/2=waiting", "waiting/2=moving"}));
  }
  EXPECT_EQ(marked.load(), 1) << "one long wait told (herd_train_long_waits_total)";
}

TEST(WaitingMarker, AFailedWaitLeavesTheMarkUp) {
  auto store = std::make_shared<RecordingStore>();
  {
    WaitingMarker marker(store, 0, milliseconds(20));
    const uint64_t wait = marker.Begin();
    ASSERT_EQ(store->AwaitSets(1).size(), 1u);
    marker.End(wait, /*ok=*/false);
  }  // the marker's thread has stopped: nothing more comes
  EXPECT_EQ(store->sets(), std::vector<std::string>({"waiting/0=waiting"}));
}

TEST(WaitingMarker, WaitsShorterThanAfterPostNothing) {
  auto store = std::make_shared<RecordingStore>();
  {
    WaitingMarker marker(store, 1, std::chrono::hours(1));
    for (int i = 0; i < 1000; ++i) marker.End(marker.Begin(), /*ok=*/true);
  }
  EXPECT_TRUE(store->sets().empty());
}

TEST(WaitingMarker, AWaitWhoseCollectiveHasFinishedPostsNothingThoughNotYetWaitedFor) {
  auto store = std::make_shared<RecordingStore>();
  std::mutex mu;
  std::condition_variable asked_again;
  int asked = 0;
  {
    WaitingMarker marker(store, 1, milliseconds(20));
    marker.Begin([&]() -> std::optional<bool> {
      {
        std::lock_guard<std::mutex> lock(mu);
        ++asked;
      }
      asked_again.notify_all();
      return true;  // done well, as an overlapped round the step loop collects later
    });
    // The marker's thread asks once per `after`: by its third question it
    // has judged the wait past `after` and posted whatever it would.
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(asked_again.wait_for(lock, std::chrono::seconds(60), [&] { return asked >= 3; }));
  }
  EXPECT_TRUE(store->sets().empty()) << store->sets().front();
}

TEST(WaitingMarker, AMarkStaysUpOnceTheWaitIsFoundFailedBeforeItIsWaitedFor) {
  auto store = std::make_shared<RecordingStore>();
  std::mutex mu;
  std::condition_variable asked_again;
  int asked_after_failing = 0;
  bool failed = false;
  {
    WaitingMarker marker(store, 3, milliseconds(20));
    marker.Begin([&]() -> std::optional<bool> {
      std::lock_guard<std::mutex> lock(mu);
      if (!failed) return std::nullopt;
      ++asked_after_failing;
      asked_again.notify_all();
      return false;
    });
    ASSERT_EQ(store->AwaitSets(1), std::vector<std::string>({"waiting/3=waiting"}));
    std::unique_lock<std::mutex> lock(mu);
    failed = true;
    // Once it is found failed, nothing clears the mark (a rank in its
    // failure path is alive and answers the roll call next).
    ASSERT_TRUE(asked_again.wait_for(lock, std::chrono::seconds(60), [&] { return asked_after_failing >= 1; }));
  }
  EXPECT_EQ(store->sets(), std::vector<std::string>({"waiting/3=waiting"}));
}

// A store whose first Set fails, as a coordinator that is handing over.
class FlakyStore : public RecordingStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    if (!failed_once_.exchange(true)) return absl::UnavailableError("no leader yet");
    return RecordingStore::Set(key, value);
  }

 private:
  std::atomic<bool> failed_once_{false};
};

TEST(WaitingMarker, APostTheCoordinatorDidNotTakeIsTriedAgain) {
  auto store = std::make_shared<FlakyStore>();
  WaitingMarker marker(store, 1, milliseconds(20));
  marker.Begin();
  EXPECT_EQ(store->AwaitSets(1), std::vector<std::string>({"waiting/1=waiting"}));
}

// A collective that finishes when the test says so, with the status it says.
class GateWork : public Work {
 public:
  absl::Status Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    opened_.wait(lock, [&] { return done_; });
    return status_;
  }
  bool Done() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void Open(absl::Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(status);
      done_ = true;
    }
    opened_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable opened_;
  bool done_ = false;
  absl::Status status_;
};

// Every collective is the next gate.
class GateCommunicator : public Communicator {
 public:
  std::shared_ptr<GateWork> gate = std::make_shared<GateWork>();
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::chrono::milliseconds timeout() const override { return milliseconds(5000); }
  std::string backend() const override { return "gate"; }
  std::shared_ptr<Work> AllReduceAsync(void*, size_t, DataType) override { return gate; }
  std::shared_ptr<Work> BroadcastAsync(void*, size_t, int) override { return gate; }
  std::shared_ptr<Work> AllGatherAsync(const void*, size_t, void*) override { return gate; }
  std::shared_ptr<Work> BarrierAsync() override { return gate; }
  std::shared_ptr<Work> ReduceScatterAsync(const void*, void*, size_t, DataType) override { return gate; }
  RangeLayout ReduceScatterLayout(size_t count, DataType) const override { return NearEqualRanges(count, 2); }
  std::shared_ptr<Work> ReduceScatterInPlaceAsync(void*, size_t, DataType) override { return gate; }
};

TEST(MarkWaitsOf, ACollectiveIsAWaitFromItsIssueUntilItIsWaitedFor) {
  auto store = std::make_shared<RecordingStore>();
  WaitingMarker marker(store, 1, milliseconds(20));
  GateCommunicator gates;
  std::unique_ptr<Communicator> marked = MarkWaitsOf(&gates, &marker);
  EXPECT_EQ(marked->backend(), "gate");
  float value = 1;
  std::shared_ptr<Work> work = marked->AllReduceAsync(&value, 1, DataType::kFloat32);
  EXPECT_EQ(store->AwaitSets(1), std::vector<std::string>({"waiting/1=waiting"})) << "issued, not yet done";
  gates.gate->Open(absl::OkStatus());
  EXPECT_TRUE(work->Wait().ok());
  EXPECT_EQ(store->AwaitSets(2), std::vector<std::string>({"waiting/1=waiting", "waiting/1=moving"}));
}

TEST(MarkWaitsOf, AMarkedCollectiveThatFinishedWellIsClearedBeforeItIsWaitedFor) {
  auto store = std::make_shared<RecordingStore>();
  WaitingMarker marker(store, 1, milliseconds(20));
  GateCommunicator gates;
  std::unique_ptr<Communicator> marked = MarkWaitsOf(&gates, &marker);
  std::shared_ptr<Work> round = marked->BroadcastAsync(nullptr, 0, 0);
  ASSERT_EQ(store->AwaitSets(1).size(), 1u);
  // Done, as an overlapped round the step loop collects later: not waiting.
  gates.gate->Open(absl::OkStatus());
  EXPECT_EQ(store->AwaitSets(2), std::vector<std::string>({"waiting/1=waiting", "waiting/1=moving"}));
  EXPECT_TRUE(round->Wait().ok());
}

TEST(MarkWaitsOf, ACollectiveThatFailsOrIsDroppedInFlightLeavesTheMarkUp) {
  for (const bool dropped : {false, true}) {
    auto store = std::make_shared<RecordingStore>();
    {
      WaitingMarker marker(store, 1, milliseconds(20));
      GateCommunicator gates;
      std::unique_ptr<Communicator> marked = MarkWaitsOf(&gates, &marker);
      std::shared_ptr<Work> work = marked->BarrierAsync();
      ASSERT_EQ(store->AwaitSets(1).size(), 1u);
      if (dropped) {
        work.reset();
      } else {
        gates.gate->Open(absl::DeadlineExceededError("barrier: Timed out"));
        EXPECT_EQ(work->Wait().code(), absl::StatusCode::kDeadlineExceeded);
      }
    }
    EXPECT_EQ(store->sets(), std::vector<std::string>({"waiting/1=waiting"})) << (dropped ? "dropped" : "failed");
  }
}

}  // namespace
}  // namespace herd
