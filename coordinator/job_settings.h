// Operator changes to a job's scheduling settings (herd resize, herd
// priority). Pure functions of (state, now) like the rest of cluster_state;
// callers persist the ChangeSet. Both refuse final jobs (FAILED_PRECONDITION)
// and unknown ids (NOT_FOUND), and validate the changed spec like a submitted
// one (INVALID_ARGUMENT naming the field).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/cluster_state.h"

namespace herd::coordinator {

// The RequestRelease reason for members beyond a lowered max_workers.

// Sets spec.min_workers / max_workers (0: unchanged). A RUNNING job with
// more members than the new max_workers releases its highest ranks at its
// next step boundary; one below a raised max grows into idle workers as
// usual. A raised min_workers binds from the job's next generation on.
absl::StatusOr<ChangeSet> ResizeJob(ClusterState& state, const std::string& job_id, int64_t min_workers,
                                    int64_t max_workers, double now);

// Sets spec.priority; the next scheduling round serves the job by it.
absl::StatusOr<ChangeSet> SetJobPriority(ClusterState& state, const std::string& job_id, int64_t priority,
                                         double now);

}  // namespace herd::coordinator
