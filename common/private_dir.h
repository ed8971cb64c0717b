// Folders that hold state nobody else should read (the coordinator's
// database of jobs, owners and specs).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace herd {

// Creates `path` (and missing parents) with mode 0700, whatever the umask.
// A folder that already exists keeps its mode: a mounted volume's root
// (Kubernetes sets 2775 for fsGroup) is the operator's to choose.
absl::Status CreatePrivateDir(const std::string& path);

}  // namespace herd
