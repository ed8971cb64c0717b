// The ready file tells whoever started the coordinator (tests, scripts) that
// it serves, and on which ports: it matters when port 0 was asked for.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace herd::coordinator {

// Writes {"listen": ..., "metrics": ..., "leading": ...} to `path`
// atomically (a temporary file renamed into place), so a reader never sees
// half a file. On etcd a standby writes it with "leading": false as soon as
// it answers (with "not the leader"), and again with true once it leads.
absl::Status WriteReadyFile(const std::string& path, const std::string& listen_address,
                            const std::string& metrics_address, bool leading = true);

}  // namespace herd::coordinator
