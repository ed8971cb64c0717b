// Waiting for a step of a communicator's setup that can only be polled (NCCL's
// non-blocking ncclCommInitRankConfig; dialing a member that may not listen
// yet), bounded by two events: its deadline, and the end of its generation.
// A peer that died before it joined would otherwise hold every other rank
// until the deadline, although the coordinator has already formed the next
// generation without it. The generation's store says so: its calls fail once
// the generation is over (the TCP mesh asks it the same way while it waits
// for higher ranks, tcp_mesh_formation.cc).
#pragma once

#include <chrono>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"

namespace herd {

struct SetupWaitOptions {
  std::chrono::milliseconds timeout{30000};
  // The pause after the first poll that is not done; it doubles after each
  // one up to max_poll_interval (equal to it: a fixed interval).
  std::chrono::milliseconds poll_interval{1};
  std::chrono::milliseconds max_poll_interval{1};
  // still_wanted is asked at most this often: one store call each.
  std::chrono::milliseconds still_wanted_interval{250};
};

struct SetupWaitHooks {
  // True once setup is done; an error ends the wait with it.
  std::function<absl::StatusOr<bool>()> poll;
  // A non-OK status ends the wait with it (the generation is over). May be
  // empty: then only the deadline bounds the wait.
  std::function<absl::Status()> still_wanted;
  std::function<void(std::chrono::milliseconds)> sleep;
  const Clock* clock = nullptr;
};

// OK once poll says done; poll's or still_wanted's error; or
// DEADLINE_EXCEEDED ("did not finish within N ms") once the timeout has
// passed with setup still in progress. Polls first, so a setup that is
// already done costs no store call; no pause runs past the deadline.
absl::Status WaitForSetup(const SetupWaitOptions& options, const SetupWaitHooks& hooks);

// The hooks with the system clock and a real sleep.
SetupWaitHooks SystemSetupWaitHooks(std::function<absl::StatusOr<bool>()> poll,
                                    std::function<absl::Status()> still_wanted);

}  // namespace herd
