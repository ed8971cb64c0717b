#include "coordinator/kv_store.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace herd::coordinator {
namespace {

// Get calls `cancelled` each time it is about to block, so the first call
// proves the caller is waiting: tests use it to order a Set after the wait.
std::function<bool()> NotifyWhenWaiting(absl::Notification* waiting) {
  return [waiting] {
    if (!waiting->HasBeenNotified()) waiting->Notify();
    return false;
  };
}

// Collects the answers of StartGet by name; each may come once.
class Answers {
 public:
  KvStore::GetDone For(const std::string& name) {
    return [this, name](absl::StatusOr<std::string> value) {
      absl::MutexLock lock(&mu_);
      EXPECT_EQ(answers_.count(name), 0u) << name << " was answered twice";
      answers_.emplace(name, std::move(value));
    };
  }
  // Answers come on the thread that settles them: here, before the call
  // that settled them returns.
  absl::StatusOr<std::string> Of(const std::string& name) {
    absl::MutexLock lock(&mu_);
    auto it = answers_.find(name);
    return it == answers_.end() ? absl::InternalError(name + " got no answer") : it->second;
  }
  bool Has(const std::string& name) {
    absl::MutexLock lock(&mu_);
    return answers_.count(name) > 0;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, absl::StatusOr<std::string>> answers_ ABSL_GUARDED_BY(mu_);
};

TEST(KvStore, SetThenGetWithinOneGenerationOnly) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("j", 1, "nccl_id", "abc").ok());
  auto value = kv.Get("j", 1, "nccl_id", absl::ZeroDuration());
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "abc");
  ASSERT_TRUE(kv.Set("j", 1, "nccl_id", "overwritten").ok());
  EXPECT_EQ(*kv.Get("j", 1, "nccl_id", absl::ZeroDuration()), "overwritten");
  EXPECT_EQ(kv.Get("j", 2, "nccl_id", absl::ZeroDuration()).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(kv.Get("other", 1, "nccl_id", absl::ZeroDuration()).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(KvStore, WaitingGetIsSatisfiedByLaterSetFromAnotherThread) {
  KvStore kv;
  absl::Notification waiting;
  std::thread setter([&] {
    waiting.WaitForNotification();
    ASSERT_TRUE(kv.Set("j", 1, "addr/0", "10.0.0.1:4000").ok());
  });
  auto value = kv.Get("j", 1, "addr/0", absl::Seconds(60), NotifyWhenWaiting(&waiting));
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "10.0.0.1:4000");
}

TEST(KvStore, GetTimesOutWithDeadlineExceeded) {
  KvStore kv;
  auto value = kv.Get("j", 1, "never", absl::Milliseconds(30));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(value.status().message().find("never"), absl::string_view::npos);
}

TEST(KvStore, CancelledCallerStopsWaiting) {
  KvStore kv;
  auto value = kv.Get("j", 1, "k", absl::Seconds(60), [] { return true; });
  EXPECT_EQ(value.status().code(), absl::StatusCode::kCancelled);
}

TEST(KvStore, AddIsAnAtomicDecimalCounter) {
  KvStore kv;
  EXPECT_EQ(*kv.Add("j", 1, "arrived", 1), 1);
  EXPECT_EQ(*kv.Add("j", 1, "arrived", 5), 6);
  EXPECT_EQ(*kv.Get("j", 1, "arrived", absl::ZeroDuration()), "6");

  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) ASSERT_TRUE(kv.Add("j", 1, "count", 1).ok());
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(*kv.Add("j", 1, "count", 0), 1000);

  ASSERT_TRUE(kv.Set("j", 1, "text", "hello").ok());
  EXPECT_EQ(kv.Add("j", 1, "text", 1).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(kv.Set("j", 1, "big", "9223372036854775807").ok());
  EXPECT_EQ(kv.Add("j", 1, "big", 1).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(KvStore, EnforcesSizeLimits) {
  KvLimits limits;
  limits.max_keys_per_generation = 3;
  KvStore kv(limits);
  absl::Status long_key = kv.Set("j", 1, std::string(513, 'k'), "v");
  EXPECT_EQ(long_key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(long_key.message().find("513 bytes"), absl::string_view::npos) << long_key;
  EXPECT_TRUE(kv.Set("j", 1, std::string(512, 'k'), "v").ok());
  EXPECT_EQ(kv.Set("j", 1, "", "v").code(), absl::StatusCode::kInvalidArgument);

  absl::Status big_value = kv.Set("j", 1, "v", std::string((1 << 20) + 1, 'x'));
  EXPECT_EQ(big_value.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(kv.Set("j", 1, "v", std::string(1 << 20, 'x')).ok());

  EXPECT_TRUE(kv.Set("j", 1, "third", "v").ok());
  absl::Status full = kv.Set("j", 1, "fourth", "v");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("3 keys"), absl::string_view::npos) << full;
  EXPECT_EQ(kv.Add("j", 1, "fourth", 1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(kv.Set("j", 1, "third", "replacing is fine").ok());
  EXPECT_TRUE(kv.Set("j", 2, "fourth", "another generation has its own budget").ok());
}

TEST(KvStore, ByteBudgetPerGenerationIsResourceExhaustedNamingTheLimit) {
  KvLimits limits;
  limits.max_bytes_per_generation = 1000;
  KvStore kv(limits);
  ASSERT_TRUE(kv.Set("j", 1, "a", std::string(600, 'x')).ok());
  EXPECT_EQ(kv.ByteCount("j", 1), 601);
  absl::Status full = kv.Set("j", 1, "b", std::string(400, 'x'));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("the limit is 1000 bytes per generation (herd-coordinator --kv-max-generation-bytes)"),
            std::string::npos)
      << full;
  EXPECT_EQ(kv.KeyCount("j", 1), 1);  // the refused write left nothing behind
  // Shrinking a value frees budget; another generation has its own.
  ASSERT_TRUE(kv.Set("j", 1, "a", "small").ok());
  EXPECT_TRUE(kv.Set("j", 1, "b", std::string(400, 'x')).ok());
  EXPECT_TRUE(kv.Set("j", 2, "a", std::string(995, 'x')).ok());
  EXPECT_EQ(kv.Add("j", 2, "counter", 1).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(KvStore, ByteBudgetOverAllJobsAndDroppedGenerationsGiveItBack) {
  KvLimits limits;
  limits.max_bytes_total = 1000;
  KvStore kv(limits);
  ASSERT_TRUE(kv.Set("j1", 1, "a", std::string(599, 'x')).ok());
  absl::Status full = kv.Set("j2", 1, "a", std::string(500, 'x'));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("the limit is 1000 bytes (herd-coordinator --kv-max-total-bytes)"), std::string::npos)
      << full;
  kv.DropGenerationsBefore("j1", 2);
  EXPECT_EQ(kv.TotalBytes(), 0);
  EXPECT_TRUE(kv.Set("j2", 1, "a", std::string(500, 'x')).ok());
  EXPECT_EQ(kv.TotalBytes(), 501);
}

TEST(KvStore, DroppedGenerationsLoseKeysAndAreFenced) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("j", 1, "k", "old").ok());
  ASSERT_TRUE(kv.Set("j", 2, "k", "new").ok());
  ASSERT_TRUE(kv.Set("other", 1, "k", "untouched").ok());
  kv.DropGenerationsBefore("j", 2);
  EXPECT_EQ(kv.KeyCount("j", 1), 0u);
  EXPECT_EQ(kv.Set("j", 1, "k", "late").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(kv.Get("j", 1, "k", absl::ZeroDuration()).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*kv.Get("j", 2, "k", absl::ZeroDuration()), "new");
  EXPECT_EQ(*kv.Get("other", 1, "k", absl::ZeroDuration()), "untouched");
}

TEST(KvStore, DropWakesWaitersOfThatGeneration) {
  KvStore kv;
  absl::Notification waiting;
  std::thread dropper([&] {
    waiting.WaitForNotification();
    kv.DropGenerationsBefore("j", INT64_MAX);
  });
  auto value = kv.Get("j", 1, "k", absl::Seconds(60), NotifyWhenWaiting(&waiting));
  dropper.join();
  EXPECT_EQ(value.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(KvStore, ShutdownWakesWaiters) {
  KvStore kv;
  absl::Notification waiting;
  std::thread stopper([&] {
    waiting.WaitForNotification();
    kv.Shutdown();
  });
  auto value = kv.Get("j", 1, "k", absl::Seconds(60), NotifyWhenWaiting(&waiting));
  stopper.join();
  EXPECT_EQ(value.status().code(), absl::StatusCode::kUnavailable);
}

TEST(KvStore, WaitingGetsHoldNoThreadAndTheSetOfTheirKeyAnswersThem) {
  Answers answers;
  KvStore kv;
  EXPECT_NE(kv.StartGet("j", 1, "nccl_id", absl::Seconds(60), answers.For("rank1")), 0u);
  EXPECT_NE(kv.StartGet("j", 1, "nccl_id", absl::Seconds(60), answers.For("rank2")), 0u);
  EXPECT_NE(kv.StartGet("j", 1, "other", absl::Seconds(60), answers.For("other")), 0u);
  EXPECT_NE(kv.StartGet("j", 1, "arrived", absl::Seconds(60), answers.For("counter")), 0u);
  EXPECT_EQ(kv.Waiting(), 4u);
  ASSERT_TRUE(kv.Set("j", 2, "nccl_id", "another generation's").ok());
  EXPECT_FALSE(answers.Has("rank1"));

  ASSERT_TRUE(kv.Set("j", 1, "nccl_id", "abc").ok());
  EXPECT_EQ(answers.Of("rank1").value_or(""), "abc");
  EXPECT_EQ(answers.Of("rank2").value_or(""), "abc");
  EXPECT_FALSE(answers.Has("other"));
  ASSERT_TRUE(kv.Add("j", 1, "arrived", 2).ok());
  EXPECT_EQ(answers.Of("counter").value_or(""), "2");
  EXPECT_EQ(kv.Waiting(), 1u);
  // A key already there answers at once.
  EXPECT_EQ(kv.StartGet("j", 1, "nccl_id", absl::Seconds(60), answers.For("late")), 0u);
  EXPECT_EQ(answers.Of("late").value_or(""), "abc");
}

TEST(KvStore, AWaitingGetsDeadlineFiresOnTheStoresClock) {
  Answers answers;
  FakeClock clock;
  KvLimits limits;
  limits.max_wait = absl::Seconds(10);
  KvStore kv(limits, &clock);
  kv.StartGet("j", 1, "k", absl::Seconds(5), answers.For("short"));
  kv.StartGet("j", 1, "k", absl::Seconds(600), answers.For("capped"));  // at limits.max_wait
  clock.Advance(4.9);
  kv.FireDeadlines();
  EXPECT_EQ(kv.Waiting(), 2u);
  clock.Advance(0.1);
  kv.FireDeadlines();
  EXPECT_EQ(answers.Of("short").status(), absl::DeadlineExceededError("kv key 'k' of job j generation 1 is not set"));
  EXPECT_FALSE(answers.Has("capped"));
  clock.Advance(5);
  kv.FireDeadlines();
  EXPECT_EQ(answers.Of("capped").status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(kv.Waiting(), 0u);
}

TEST(KvStore, CancelDropAndShutdownAnswerWaitingGets) {
  Answers answers;
  KvStore kv;
  const KvStore::WaitId cancelled = kv.StartGet("j", 1, "k", absl::Seconds(60), answers.For("cancelled"));
  kv.StartGet("j", 1, "k", absl::Seconds(60), answers.For("dropped"));
  kv.StartGet("j", 2, "k", absl::Seconds(60), answers.For("live"));
  kv.CancelGet(cancelled);
  kv.CancelGet(cancelled);  // answered already: nothing more (Answers fails a second answer)
  EXPECT_EQ(answers.Of("cancelled").status(), absl::CancelledError("the caller cancelled the kv wait"));

  kv.DropGenerationsBefore("j", 2);
  EXPECT_EQ(answers.Of("dropped").status(),
            absl::FailedPreconditionError("job j: generation 1 is no longer current"));
  EXPECT_FALSE(answers.Has("live"));

  kv.Shutdown();
  EXPECT_EQ(answers.Of("live").status(), absl::UnavailableError("coordinator is shutting down"));
  EXPECT_EQ(kv.Waiting(), 0u);
}

}  // namespace
}  // namespace herd::coordinator
