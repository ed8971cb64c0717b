// Leaving a job at a step boundary without losing or repeating a step.
//
// A rank asked to leave (drain, shrink: TrainerOptions::release_requested)
// cannot just stop: its peers would block in the next collective and the job
// would pay a failure. Instead every rank votes at each commit point (a
// single-float all-reduce on the control communicator, so every rank sees
// the same count after the same step) and, when anyone leaves, all of them
// end the generation right after that commit: the leaver with IsReleased
// (its trainer exits TRAINER_EXIT_RELEASED), the others with IsPeerReleased,
// and they join the next generation and heal from their own commit of that
// very step.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd {

// How many ranks leave at this commit point, this one counted when
// `leaving`. A collective: every rank calls it at the same commit points.
absl::StatusOr<int> CountLeavingRanks(Communicator* comm, bool leaving);

// What a generation ends with when this rank leaves after committing `step`,
// and when `leavers` other ranks do.
absl::Status ReleasedStatus(int64_t step);
absl::Status PeerReleasedStatus(int leavers, int64_t step);

bool IsReleased(const absl::Status& status);
bool IsPeerReleased(const absl::Status& status);

}  // namespace herd
