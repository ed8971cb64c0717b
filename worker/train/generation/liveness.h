// The trainer's sign of life for its daemon: the mtime of a file the daemon
// names (--alive-file). The daemon kills a trainer whose file stays old past
// its deadline (--trainer-stuck-seconds), so every wait in the trainer is
// bounded by a timeout shorter than that and marks progress around it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace herd {

// Once, at startup; an empty path turns MarkAlive into a no-op.
// FAILED_PRECONDITION naming the path when it cannot be opened.
absl::Status SetAliveFile(const std::string& path);

// Touches the file, at most about once a second; cheap enough for every step.
void MarkAlive();

// Writes `generation` into the file once this trainer joined it: the daemon
// charges the trainer's exit to the last generation it joined, not to a newer
// one it was assigned but never reached. UNAVAILABLE when the write fails
// (the exit would then be charged to an older generation and ignored).
absl::Status MarkJoined(int64_t generation);

}  // namespace herd
