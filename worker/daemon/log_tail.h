// Where the last lines of a log file start, for `herd logs --tail N`.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace herd::worker {

// The byte offset at which the last `lines` lines of the file begin (a last
// line without its newline counts as a line); 0 when the file has no more
// lines than that, its size when `lines` is 0. Reads the file backwards in
// blocks, so a long log costs only its tail. NOT_FOUND names the path when it
// does not exist.
absl::StatusOr<int64_t> TailOffset(const std::string& path, int64_t lines);

}  // namespace herd::worker
