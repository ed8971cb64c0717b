// Runs one process per rank, as herd runs one trainer process per worker.
#pragma once

#include <functional>

#include "absl/status/status.h"

namespace herd::bench {

// Forks `world` children; child r runs body(r) and exits with its return
// value. Call before this process starts threads (fork copies only the
// caller's). Fails when a child exits non-zero or is killed, and kills the
// others then, so one crashed rank cannot leave its peers hanging.
absl::Status RunRankProcesses(int world, const std::function<int(int rank)>& body);

}  // namespace herd::bench
