// Secrets on disk (bearer tokens, the coordinator's auth file) must be
// private to their owner, as ssh demands of private keys.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace herd {

// OK when `path` (after symlinks) is a regular file that group and others
// cannot read or write. One exception, for Kubernetes Secret volumes (files
// owned by root, group fsGroup, mode 0440): a file owned by another user may
// be group-readable when its group is one of this process's groups. Else
// PERMISSION_DENIED saying what to fix (NOT_FOUND when it does not exist).
absl::Status CheckPrivateFile(const std::string& path, const std::string& what);

// Reads a file that CheckPrivateFile accepts.
absl::StatusOr<std::string> ReadPrivateFile(const std::string& path, const std::string& what);

}  // namespace herd
