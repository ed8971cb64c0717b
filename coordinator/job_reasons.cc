#include "coordinator/job_reasons.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace herd::coordinator {

absl::string_view GenerationStartReasonName(GenerationStartReason reason) {
  switch (reason) {
    case GenerationStartReason::kStart:
      return "start";
    case GenerationStartReason::kMemberLost:
      return "member_lost";
    case GenerationStartReason::kFailureReported:
      return "failure_reported";
    case GenerationStartReason::kJoin:
      return "join";
    case GenerationStartReason::kCoordinatorRestart:
      return "coordinator_restart";
    case GenerationStartReason::kReleased:
      return "released";
  }
  return "unknown";
}

std::optional<GenerationStartReason> GenerationStartReasonFromName(absl::string_view name) {
  for (GenerationStartReason reason :
       {GenerationStartReason::kStart, GenerationStartReason::kMemberLost, GenerationStartReason::kFailureReported,
        GenerationStartReason::kJoin, GenerationStartReason::kCoordinatorRestart, GenerationStartReason::kReleased}) {
    if (GenerationStartReasonName(reason) == name) return reason;
  }
  return std::nullopt;
}

bool IsFailure(GenerationStartReason reason) {
  return reason == GenerationStartReason::kMemberLost || reason == GenerationStartReason::kFailureReported;
}

absl::string_view ReleaseReasonName(ReleaseReason reason) {
  switch (reason) {
    case ReleaseReason::kDrain:
      return "drain";
    case ReleaseReason::kShrink:
      return "shrink";
    case ReleaseReason::kSuspend:
      return "suspend";
    case ReleaseReason::kResized:
      return "resized";
  }
  return "unknown";
}

std::optional<ReleaseReason> ReleaseReasonFromName(absl::string_view name) {
  for (ReleaseReason reason :
       {ReleaseReason::kDrain, ReleaseReason::kShrink, ReleaseReason::kSuspend, ReleaseReason::kResized}) {
    if (ReleaseReasonName(reason) == name) return reason;
  }
  return std::nullopt;
}

bool IsSchedulerRelease(ReleaseReason reason) {
  return reason == ReleaseReason::kShrink || reason == ReleaseReason::kSuspend;
}

absl::string_view PreemptionName(Preemption preemption) {
  switch (preemption) {
    case Preemption::kShrink:
      return "shrink";
    case Preemption::kSuspend:
      return "suspend";
  }
  return "unknown";
}

absl::string_view PendingReasonName(PendingReason reason) {
  switch (reason) {
    case PendingReason::kWaitingForWorkers:
      return "waiting_for_workers";
    case PendingReason::kWaitingForReleasedWorkers:
      return "waiting_for_released_workers";
    case PendingReason::kSuspended:
      return "suspended";
    case PendingReason::kAllReleased:
      return "all_released";
    case PendingReason::kNoFittingWorkers:
      return "no_fitting_workers";
  }
  return "unknown";
}

std::optional<PendingReason> PendingReasonFromName(absl::string_view name) {
  for (PendingReason reason : {PendingReason::kWaitingForWorkers, PendingReason::kWaitingForReleasedWorkers,
                               PendingReason::kSuspended, PendingReason::kAllReleased,
                               PendingReason::kNoFittingWorkers}) {
    if (PendingReasonName(reason) == name) return reason;
  }
  return std::nullopt;
}

std::string WaitingForWorkersText() { return "waiting for workers"; }

std::string WaitingForReleasedWorkersText(int64_t have, int64_t need) {
  return absl::StrCat("waiting for workers released by lower-priority jobs: have ", have, ", need ", need);
}

std::string WaitingToFormText(int64_t have, int64_t need) {
  return absl::StrCat("waiting for workers: have ", have, ", need ", need);
}

std::string SuspendedText(int64_t step, const std::string& from) {
  return absl::StrCat("suspended at step ", step, " for a higher-priority job; resumes from ", from,
                      " when workers are free");
}

std::string NoFittingWorkersText(const std::string& placement, int64_t fitting, int64_t need) {
  return absl::StrCat("waiting for workers with ", placement, ": ", fitting, " registered fit, need ", need);
}

std::string IslandsSittingOutText(const std::map<std::string, int64_t>& sitting_out, int64_t minimum) {
  std::vector<std::string> parts;
  for (const auto& [island, available] : sitting_out) {
    parts.push_back(absl::StrCat("'", island, "' (", available, available == 1 ? " worker" : " workers", ")"));
  }
  return absl::StrCat(parts.size() == 1 ? "island " : "islands ", absl::StrJoin(parts, ", "),
                      parts.size() == 1 ? " sits" : " sit", " out: fewer than sync.min_workers_per_island (", minimum,
                      ") workers available; rejoins when it has enough");
}

std::string AllReleasedText(int64_t step, const std::string& from) {
  return absl::StrCat("every member was released at step ", step, " (drained); resumes from ", from,
                      " when workers are free");
}

}  // namespace herd::coordinator
