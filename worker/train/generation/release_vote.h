// Leaving a job, or re-forming it, at a step boundary without losing or
// repeating a step.
//
// A rank asked to leave (drain, shrink, suspension) cannot just stop: its
// peers would block in the next collective and the job would pay a failure.
// Nor can the coordinator fence a generation to let workers join without the
// ranks re-computing the steps since their last commit. Instead every rank
// votes at each commit point: every member of the job hears which ranks
// leave (TrainerOptions::leave_request), but heartbeats reach them at
// different times, so each rank adds what it heard to one all-reduce (a
// float per rank, plus the re-form count, on the control communicator) and
// all of them see the same union after the same step:
// - when any rank leaves, all of them end the generation right after that
//   commit: the leavers as GenerationOutcome::kReleased (the trainer exits
//   TRAINER_EXIT_RELEASED), the others as kPeerReleased; they join the
//   next generation and heal from their own commit of that very step. All
//   named leavers go at this one boundary, however many heard it;
// - when every rank leaves (suspension, or draining every worker), nobody
//   would keep that commit, so rank 0 first checkpoints the step and waits
//   until the coordinator recorded it (AgreeOnCheckpoint); only then they
//   leave, as kReleasedAll (TRAINER_EXIT_RELEASED_ALL), and the job
//   resumes from that checkpoint;
// - when nobody leaves but the job is asked to re-form (idle workers wait to
//   join it), all end as kReformed and join the next generation with
//   JoinGenerationRequest.at_boundary.
// The trainer decides which (Trainer::VoteOnRelease); the outcomes are in
// worker/contract/generation_outcome.h.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd {

struct BoundaryVote {
  std::vector<int64_t> leavers;  // ranks that leave at this commit point, ascending
  int reformers = 0;             // ranks that saw the request to re-form this generation
};

// A collective: every rank calls it at the same commit points, with the
// ranks it heard are leaving (ranks outside the world are ignored).
absl::StatusOr<BoundaryVote> TakeBoundaryVote(Communicator* comm, const std::vector<int64_t>& heard_leaving,
                                              bool reform);

// Whether rank 0 has the boundary's checkpoint written and recorded
// (`recorded`, meaningful on rank 0 only): a collective, every rank learns
// rank 0's answer.
absl::StatusOr<bool> AgreeOnCheckpoint(Communicator* comm, int64_t rank, bool recorded);

}  // namespace herd
