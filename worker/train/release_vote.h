// Leaving a job, or re-forming it, at a step boundary without losing or
// repeating a step.
//
// A rank asked to leave (drain, shrink, suspend:
// TrainerOptions::release_requested) cannot just stop: its peers would block
// in the next collective and the job would pay a failure. Nor can the
// coordinator fence a generation to let workers join without the ranks
// re-computing the steps since their last commit. Instead every rank votes at
// each commit point (a two-float all-reduce on the control communicator, so
// every rank sees the same counts after the same step):
// - when anyone leaves, all of them end the generation right after that
//   commit: the leavers with IsReleased (the trainer exits
//   TRAINER_EXIT_RELEASED), the others with IsPeerReleased; they join the
//   next generation and heal from their own commit of that very step;
// - when every rank leaves (or one rank heard that the whole job is
//   suspended), nobody would keep that commit, so rank 0 first
//   checkpoints the step and waits until the coordinator recorded it
//   (AgreeOnCheckpoint); only then they leave, with IsReleasedAll
//   (TRAINER_EXIT_RELEASED_ALL), and the job resumes from that checkpoint;
// - when nobody leaves but the job is asked to re-form (idle workers wait to
//   join it), all end with IsReformAtBoundary and join the next generation
//   with JoinGenerationRequest.at_boundary.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd {

struct BoundaryVote {
  int leavers = 0;    // ranks that leave at this commit point
  int reformers = 0;  // ranks that saw the request to re-form this generation
  // Ranks that saw the whole job suspended: the coordinator asked every
  // rank, and heartbeats reach them at different times, so the first to
  // hear it takes everyone along (all leave, as when leavers == world).
  int suspenders = 0;
};

// A collective: every rank calls it at the same commit points.
absl::StatusOr<BoundaryVote> TakeBoundaryVote(Communicator* comm, bool leaving, bool reform, bool whole_job);

// Whether rank 0 has the boundary's checkpoint written and recorded
// (`recorded`, meaningful on rank 0 only): a collective, every rank learns
// rank 0's answer.
absl::StatusOr<bool> AgreeOnCheckpoint(Communicator* comm, int64_t rank, bool recorded);

// What a generation ends with after committing `step`: this rank leaves;
// every rank leaves (the step is checkpointed); `leavers` other ranks leave;
// the job re-forms with everyone.
absl::Status ReleasedStatus(int64_t step);
absl::Status ReleasedAllStatus(int64_t step);
absl::Status PeerReleasedStatus(int leavers, int64_t step);
absl::Status ReformAtBoundaryStatus(int64_t step);

// True for ReleasedStatus and ReleasedAllStatus: this trainer is done.
bool IsReleased(const absl::Status& status);
bool IsReleasedAll(const absl::Status& status);
bool IsPeerReleased(const absl::Status& status);
bool IsReformAtBoundary(const absl::Status& status);

}  // namespace herd
