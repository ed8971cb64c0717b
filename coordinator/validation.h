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

// INVALID_ARGUMENT naming the first bad field of a progress report and its
// value: counts (rank, step, epoch, samples_in_epoch, total_steps) must be
// >= 0; samples_per_second and learning_rate finite and >= 0; eval names
// non-empty and without control characters. loss and eval values may be NaN
// or infinite: that is what a diverging model measures, and it is stored as
// reported.
// A straggler (rank 0's reports) must have counts >= 0, finite times >= 0, a
// holdback_fraction in [0, 1] and an empty worker_id (the coordinator fills
// it in).
absl::Status ValidateProgressReport(const v1::ReportProgressRequest& report);

// INVALID_ARGUMENT unless the report's straggler, if any, names a rank below
// `world_size` (the members of the generation it reports on) and its ranks,
// if any, are exactly that many.
absl::Status ValidateRanksInWorld(const v1::ReportProgressRequest& report, int64_t world_size);

// INVALID_ARGUMENT naming the first bad field of a checkpoint record (besides
// its path, see ValidateCheckpointPath) and its value.
absl::Status ValidateCheckpointRecord(const v1::CommitCheckpointRequest& record);

}  // namespace herd::coordinator
