#include "worker/comm/setup_wait.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"

namespace herd {

absl::Status WaitForSetup(const SetupWaitOptions& options, const SetupWaitHooks& hooks) {
  const auto seconds = [](std::chrono::milliseconds ms) { return std::chrono::duration<double>(ms).count(); };
  const double started = hooks.clock->Now();
  const double deadline = started + seconds(options.timeout);
  double next_check = started + seconds(options.still_wanted_interval);
  std::chrono::milliseconds pause = options.poll_interval;
  while (true) {
    absl::StatusOr<bool> done = hooks.poll();
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
    const double now = hooks.clock->Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("did not finish within ", options.timeout.count(), " ms"));
    }
    if (hooks.still_wanted && now >= next_check) {
      if (absl::Status wanted = hooks.still_wanted(); !wanted.ok()) return wanted;
      next_check = now + seconds(options.still_wanted_interval);
    }
    // Rounded up: a pause cut short of the deadline would only cost one more poll.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        std::chrono::duration<double>(deadline - hooks.clock->Now()));
    hooks.sleep(std::clamp(pause, std::chrono::milliseconds(1), std::max(left, std::chrono::milliseconds(1))));
    pause = std::min(pause * 2, std::max(options.max_poll_interval, options.poll_interval));
  }
}

SetupWaitHooks SystemSetupWaitHooks(std::function<absl::StatusOr<bool>()> poll,
                                    std::function<absl::Status()> still_wanted) {
  static const MonotonicClock clock;
  SetupWaitHooks hooks;
  hooks.poll = std::move(poll);
  hooks.still_wanted = std::move(still_wanted);
  hooks.sleep = [](std::chrono::milliseconds ms) { std::this_thread::sleep_for(ms); };
  hooks.clock = &clock;
  return hooks;
}

}  // namespace herd
