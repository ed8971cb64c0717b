// Why the coordinator decided what it did, as enums: decisions branch on
// these, never on text. The text users see (a job's reason, metrics labels,
// log lines) is derived from them here, in one place. Low in the
// coordinator's dependency order: the model (cluster_state.h) holds them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace herd::coordinator {

// Why the coordinator started a generation (how one ended, on a worker, is
// GenerationOutcome in worker/contract/generation_outcome.h).
enum class GenerationStartReason {
  kStart,               // the job's first, or its first after waiting PENDING
  kMemberLost,          // a member's lease expired or its trainer exited non-zero
  kFailureReported,     // a member's trainer reported a failure
  kJoin,                // idle workers join at a step boundary
  kCoordinatorRestart,  // a restarted coordinator lost members' trainers
  kReleased,            // a member left at a step boundary when asked to (release.h)
};
// The metrics label and log text ("start", "member_lost", ...); also how
// the database stores it.
absl::string_view GenerationStartReasonName(GenerationStartReason reason);
// The stored name back (the database only); nullopt for an unknown name.
std::optional<GenerationStartReason> GenerationStartReasonFromName(absl::string_view name);
// Generations started by a failure are the ones that cost restart budget.
bool IsFailure(GenerationStartReason reason);

// Why a worker is asked to leave a RUNNING job at its next step boundary
// (release.h).
enum class ReleaseReason {
  kDrain,    // herd drain, or the worker's daemon is shutting down
  kShrink,   // the scheduler gives it to a higher-priority job; the job goes on
  kSuspend,  // the scheduler takes every member; the job goes back to PENDING
  kResized,  // herd resize lowered max_workers
};

// The metrics label and log text ("drain", "shrink", "suspend", "resized");
// also how the database stores it.
absl::string_view ReleaseReasonName(ReleaseReason reason);
// The stored name back (the database only); nullopt for an unknown name.
std::optional<ReleaseReason> ReleaseReasonFromName(absl::string_view name);
// Whether the scheduler asked it: the worker comes to a higher-priority job.
bool IsSchedulerRelease(ReleaseReason reason);

// How the scheduler preempts a lower-priority RUNNING job.
enum class Preemption { kShrink, kSuspend };
// The metrics label (herd_coordinator_preemptions_total{kind}).
absl::string_view PreemptionName(Preemption preemption);

// Why a PENDING job has not started.
enum class PendingReason {
  kWaitingForWorkers,          // submitted, or preempting can no longer start it
  kWaitingForReleasedWorkers,  // lower-priority jobs release workers to it
  kSuspended,                  // every member left for a higher-priority job
  kAllReleased,                // every member was released (drained)
  kNoFittingWorkers,           // fewer live workers fit its placement than its min_workers
};
// The stored name ("waiting_for_workers", ...): the database only.
absl::string_view PendingReasonName(PendingReason reason);
std::optional<PendingReason> PendingReasonFromName(absl::string_view name);

// The job's reason text (JobInfo.reason) for each PendingReason.
std::string WaitingForWorkersText();
// `have` idle workers kept for it, `need` its min_workers.
std::string WaitingForReleasedWorkersText(int64_t have, int64_t need);
// A RUNNING job whose next generation waits to form: `have` members, `need`
// its min_workers.
std::string WaitingToFormText(int64_t have, int64_t need);
// Left at `step`; resumes from `from` (a checkpoint path).
std::string SuspendedText(int64_t step, const std::string& from);
std::string AllReleasedText(int64_t step, const std::string& from);
// `placement` is PlacementText (placement.h); `fitting` live workers fit
// it, `need` its min_workers.
std::string NoFittingWorkersText(const std::string& placement, int64_t fitting, int64_t need);
// A RUNNING job whose generation formed without the islands `sitting_out`
// (label value -> its workers available), each short of `minimum`
// (sync.min_workers_per_island).
std::string IslandsSittingOutText(const std::map<std::string, int64_t>& sitting_out, int64_t minimum);

}  // namespace herd::coordinator
