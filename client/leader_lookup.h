// Which coordinator a `herd` command calls when --coordinator names several:
// the one that leads, found with the standard health check (a follower
// answers it with the leader's address).
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "common/leader_channel.h"

namespace herd::client {

// The address to call. With several addresses it retries through an
// election (about 6 s) and then fails with "cannot reach the coordinator at
// A, B: " and what each address said last (client/unreachable.h). With one,
// a follower's hint is followed, and an address that does not answer is
// returned as it is: the command then says what it hears, as it always did.
absl::StatusOr<std::string> FindLeader(LeaderChannel& coordinators, std::chrono::milliseconds timeout);

}  // namespace herd::client
