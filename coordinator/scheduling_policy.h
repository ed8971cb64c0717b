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

// The scheduler asks releases with kReleaseShrink (the job keeps running,
// smaller) and kReleaseSuspend (every member leaves; release.h).

// A PENDING job's reason while workers are released to it, and after.
inline constexpr char kWaitingForReleased[] = "waiting for workers released by lower-priority jobs";
inline constexpr char kWaitingForWorkers[] = "waiting for workers";

// Metrics labels (herd_coordinator_preemptions_total{kind}).
inline constexpr char kPreemptShrink[] = "shrink";
inline constexpr char kPreemptSuspend[] = "suspend";

// True when `a` is served before `b`: higher priority first, then submit order.
bool ServedBefore(const JobRecord& a, const JobRecord& b);

// IDLE workers of the spec's device kind that `job_id` may take: those held
// for it (their trainer still holds its context) and those reserved for it
// first, then free ones, lowest ids first; never one held or (with
// `honor_reservations`) reserved for another job, nor `excluded`, nor a
// cordoned or draining one.
std::vector<std::string> IdleWorkersFor(const ClusterState& state, const std::string& job_id,
                                        const v1::JobSpec& spec, const std::string& excluded = "",
                                        bool honor_reservations = true);

struct JobStart {
  std::string job_id;
  std::vector<std::string> workers;  // ranks 0..W-1
};

struct MemberRelease {
  std::string job_id;
  std::string worker_id;
  std::string reason;  // kReleaseShrink or kReleaseSuspend
};

struct SchedulePlan {
  std::vector<JobStart> starts;
  // New release requests (none repeats one already requested).
  std::vector<MemberRelease> releases;
  // Jobs preempted by `releases`, with kPreemptShrink or kPreemptSuspend.
  std::map<std::string, std::string> preempted;
  // IDLE worker -> the waiting job it is kept for.
  std::map<std::string, std::string> reserved;
  // PENDING job -> its reason while workers are released to it.
  std::map<std::string, std::string> waiting;
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
