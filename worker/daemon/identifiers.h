// Names that the daemon turns into paths or sends to the coordinator.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace herd::worker {

// Job ids become path components under the work dir: [a-z0-9-]{1,64}.
bool IsValidJobId(absl::string_view job_id);

// Worker ids: [A-Za-z0-9._-]{1,128}.
bool IsValidWorkerId(absl::string_view worker_id);

// A worker id made from the host name and the work dir's last component,
// with characters outside the allowed set replaced by '-'. Stable across
// restarts of the same daemon, distinct for two daemons on one host.
std::string DefaultWorkerId(absl::string_view host_name, absl::string_view work_dir);

// A fresh random incarnation for one daemon process: 16 lowercase hex
// digits. The coordinator compares it across registrations to tell a
// restarted daemon (whose trainers died with it) from one that only
// re-registered (common/incarnation.h).
std::string NewIncarnation();

// [0-9a-f]{16}.
bool IsValidIncarnation(absl::string_view incarnation);

}  // namespace herd::worker
