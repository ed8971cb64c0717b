// The ready file tells whoever started the coordinator (tests, scripts) that
// it serves, and on which ports: it matters when port 0 was asked for.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace herd::coordinator {

// Writes {"listen": ..., "metrics": ...} to `path` atomically (a temporary
// file renamed into place), so a reader never sees half a file.
absl::Status WriteReadyFile(const std::string& path, const std::string& listen_address,
                            const std::string& metrics_address);

}  // namespace herd::coordinator
