// Who runs where: the scheduling policy as a pure function of the cluster
// state (docs/scheduling.md). PENDING jobs are served by priority (higher
// first), equal priorities in submit order. A job that fits in the idle
// workers starts; one that does not may take workers from lower-priority
// RUNNING jobs: they shrink at their next step boundary (RequestRelease) but
// never below min_workers, and a `preemptible` job left at its min_workers
// may be suspended whole (SchedulePolicyOptions). While those workers are on
// their way, the job's idle workers are reserved for it, so neither later
// pending jobs (backfill) nor running jobs growing below max_workers can
// take them.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "coordinator/cluster_state.h"
#include "coordinator/release.h"

namespace herd::coordinator {

// The scheduler asks releases with ReleaseReason::kShrink (the job keeps
// running, smaller) and kSuspend (every member leaves; release.h).

// True when `a` is served before `b`: higher priority first, then submit order.
bool ServedBefore(const JobRecord& a, const JobRecord& b);

struct JobStart {
  std::string job_id;
  std::vector<std::string> workers;  // ranks 0..W-1
};

struct MemberRelease {
  std::string job_id;
  std::string worker_id;
  ReleaseReason reason;  // kShrink or kSuspend
};

// A PENDING job that lower-priority jobs release workers to
// (PendingReason::kWaitingForReleasedWorkers).
struct WaitingForReleased {
  int64_t have = 0;  // idle workers kept for it
  int64_t need = 0;  // its min_workers
};

struct SchedulePlan {
  std::vector<JobStart> starts;
  // New release requests (none repeats one already requested).
  std::vector<MemberRelease> releases;
  // Jobs preempted by `releases`, and how.
  std::map<std::string, Preemption> preempted;
  // IDLE worker -> the waiting job it is kept for.
  std::map<std::string, std::string> reserved;
  // PENDING jobs workers are released to.
  std::map<std::string, WaitingForReleased> waiting;
};

struct SchedulePolicyOptions {
  // Whether preemptible jobs may be suspended: their ranks leave together
  // at a step boundary that rank 0 checkpointed (TRAINER_EXIT_RELEASED_ALL),
  // and the job resumes from that checkpoint (docs/scheduling.md).
  bool suspend = true;
};

// The whole decision for one round; ignores last round's reservations.
SchedulePlan PlanSchedule(const ClusterState& state, const SchedulePolicyOptions& options = {});

}  // namespace herd::coordinator
