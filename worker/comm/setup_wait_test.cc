#include "worker/comm/setup_wait.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/strings/match.h"

namespace herd {
namespace {

// A setup that finishes after `polls_until_done` polls (never, if negative),
// on a fake clock that advances only when the wait sleeps.
struct FakeSetup {
  FakeClock clock{0.0};
  int polls = 0;
  int polls_until_done = -1;
  int wanted_calls = 0;
  double generation_ends_at = 1e9;  // still_wanted fails from then on
  double ended_seen_at = -1;

  SetupWaitHooks Hooks(bool with_still_wanted = true) {
    SetupWaitHooks hooks;
    hooks.poll = [this]() -> absl::StatusOr<bool> { return ++polls == polls_until_done; };
    if (with_still_wanted) {
      hooks.still_wanted = [this]() -> absl::Status {
        ++wanted_calls;
        if (clock.Now() < generation_ends_at) return absl::OkStatus();
        ended_seen_at = clock.Now();
        return absl::UnavailableError("generation 3 is over");
      };
    }
    hooks.sleep = [this](std::chrono::milliseconds ms) { clock.Advance(ms.count() / 1000.0); };
    hooks.clock = &clock;
    return hooks;
  }
};

SetupWaitOptions Options(int timeout_ms) {
  SetupWaitOptions options;
  options.timeout = std::chrono::milliseconds(timeout_ms);
  options.poll_interval = std::chrono::milliseconds(1);
  options.still_wanted_interval = std::chrono::milliseconds(250);
  return options;
}

TEST(SetupWaitTest, EndsOnceTheSetupIsDone) {
  FakeSetup setup;
  setup.polls_until_done = 40;
  EXPECT_TRUE(WaitForSetup(Options(30000), setup.Hooks()).ok());
  EXPECT_EQ(setup.polls, 40);
  EXPECT_EQ(setup.wanted_calls, 0);  // 39 ms in: not yet time to ask the store
}

TEST(SetupWaitTest, APollErrorEndsTheWaitWithIt) {
  FakeSetup setup;
  SetupWaitHooks hooks = setup.Hooks();
  hooks.poll = []() -> absl::StatusOr<bool> { return absl::InternalError("ncclSystemError"); };
  const absl::Status status = WaitForSetup(Options(30000), hooks);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "ncclSystemError");
}

TEST(SetupWaitTest, TheDeadlineEndsASetupThatNeverFinishes) {
  FakeSetup setup;
  const absl::Status status = WaitForSetup(Options(2000), setup.Hooks(/*with_still_wanted=*/false));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(status.message(), "within 2000 ms")) << status;
  EXPECT_GE(setup.clock.Now(), 2.0);
  EXPECT_LT(setup.clock.Now(), 2.0 + 0.002);  // within a poll interval of it
}

TEST(SetupWaitTest, TheGenerationsEndStopsTheWaitLongBeforeTheDeadline) {
  FakeSetup setup;
  setup.generation_ends_at = 1.1;
  const absl::Status status = WaitForSetup(Options(30000), setup.Hooks());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "generation 3 is over");
  // Seen at the first check after it ended: within one check interval.
  EXPECT_GE(setup.ended_seen_at, 1.1);
  EXPECT_LE(setup.ended_seen_at, 1.1 + 0.25 + 0.002);
  EXPECT_LE(setup.clock.Now(), 1.1 + 0.25 + 0.002);
}

TEST(SetupWaitTest, TheStoreIsAskedAtMostOncePerInterval) {
  FakeSetup setup;
  const absl::Status status = WaitForSetup(Options(10000), setup.Hooks());
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  // 10 s at one check per 250 ms (plus a poll interval's drift each time).
  EXPECT_LE(setup.wanted_calls, 40);
  EXPECT_GE(setup.wanted_calls, 38);
}

TEST(SetupWaitTest, PausesDoubleUpToTheirCapAndNeverPassTheDeadline) {
  FakeSetup setup;
  SetupWaitHooks hooks = setup.Hooks(/*with_still_wanted=*/false);
  std::vector<int64_t> pauses;
  hooks.sleep = [&](std::chrono::milliseconds ms) {
    pauses.push_back(ms.count());
    setup.clock.Advance(ms.count() / 1000.0);
  };
  SetupWaitOptions options = Options(1000);
  options.poll_interval = std::chrono::milliseconds(5);
  options.max_poll_interval = std::chrono::milliseconds(200);
  EXPECT_EQ(WaitForSetup(options, hooks).code(), absl::StatusCode::kDeadlineExceeded);
  // 5+10+20+40+80+160 = 315 ms, then 200 ms pauses, the last one cut at 1 s.
  const std::vector<int64_t> expected = {5, 10, 20, 40, 80, 160, 200, 200, 200, 85};
  EXPECT_EQ(pauses, expected);
  EXPECT_NEAR(setup.clock.Now(), 1.0, 1e-6);
}

}  // namespace
}  // namespace herd
