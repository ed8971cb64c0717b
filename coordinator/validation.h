// Checks on names and paths that workers send the coordinator.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

// Worker ids are [A-Za-z0-9._-]{1,128}: they appear in metrics labels, logs
// and the state database.
absl::Status ValidateWorkerId(const std::string& worker_id);

// INVALID_ARGUMENT naming the bad field of a registration.
absl::Status ValidateRegistration(const v1::RegisterWorkerRequest& request);

// A registration's incarnation (common/incarnation.h): empty (unknown) or up
// to kMaxIncarnationBytes letters and digits.
absl::Status ValidateIncarnation(const std::string& incarnation);

// A checkpoint path as committed by rank 0: relative to the checkpoint root,
// with no ".." component, so the paths handed back for deletion never leave
// that root.
absl::Status ValidateCheckpointPath(const std::string& path);

}  // namespace herd::coordinator
