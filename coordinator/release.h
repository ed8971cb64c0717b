// Placeholder for the drain branch's release mechanism (issue 18): only the
// declaration the scheduling policy codes against. Replaced by the drain
// branch's coordinator/release.{h,cc} at merge.
#pragma once

#include <string>

#include "coordinator/cluster_state.h"

namespace herd::coordinator {

// Asks `worker_id` to leave the RUNNING job `job_id` at the job's next step
// boundary: all ranks commit at that step, the worker's trainer exits, and the
// job's next generation forms without it from that commit, charging no
// restart budget; the worker becomes IDLE.
ChangeSet RequestRelease(ClusterState& state, const std::string& job_id, const std::string& worker_id,
                         const std::string& reason, double now);

}  // namespace herd::coordinator
