// A trainer process's life across generations: train in the current one;
// when it fails (a collective error or timeout, or the coordinator fencing
// it), report the failure, join the next generation and continue from the
// last commit held in memory instead of restarting from disk. What ends a
// generation, and which outcomes go on, is GenerationOutcome
// (worker/contract/generation_outcome.h).
#pragma once

#include <chrono>

#include "absl/status/status.h"
#include "proto/herd.pb.h"
#include "worker/contract/generation_outcome.h"
#include "worker/train/generation/coordinator_link.h"
#include "worker/train/group_communicators.h"
#include "worker/train/batches/sample_ledger.h"
#include "worker/train/trainer.h"
#include "worker/train/training_context.h"

namespace herd {

// JoinGeneration waiting up to `timeout` in short calls, marking the
// trainer alive between them (a long wait is not a stuck trainer).
// With `after_generation`, only a generation newer than it will do;
// `at_boundary` as in CoordinatorLink::JoinGeneration.
absl::StatusOr<v1::JoinGenerationResponse> JoinWithin(CoordinatorLink* client, std::chrono::milliseconds timeout,
                                                      int64_t after_generation = 0, bool at_boundary = false);

// The generation after `failed`, which ended as `end` at `step`
// (`reported`: the failure was already reported and heard): retried until
// the coordinator has moved on (a lost report is sent again) or `timeout`
// passes. After a peer's release nothing is reported: the coordinator
// re-forms the job when the leaver's exit reaches it, and the join waits
// for that generation. After a re-form the ranks agreed on, the join itself
// tells the coordinator (at_boundary).
absl::StatusOr<v1::JoinGenerationResponse> JoinAfter(CoordinatorLink* client, const v1::JoinGenerationResponse& failed,
                                                     const GenerationResult& end, int64_t step, bool reported,
                                                     std::chrono::milliseconds timeout);

struct GenerationLoopOptions {
  // How long to wait for the next generation to form after a failure, or to
  // be re-admitted when this worker was left out of it (its lease lapsed
  // during a stall or partition); the job context is kept all that time.
  std::chrono::milliseconds join_timeout{300000};
  // Each generation's communicators; tests inject their own.
  CommunicatorFactory communicators = CreateGroupCommunicators;
};

// Runs generations from `first` on `context` until one ends this trainer
// (JoinsNextGeneration is false): training finished, this rank was released
// at a step boundary (release_vote.h), or training failed for good, which
// includes a generation failure after which no next generation formed
// within the join timeout. After a boundary other ranks left at, or a
// re-form, this rank joins the next generation without reporting a failure:
// nothing failed.
// The trainer's main and the in-process tests both run this.
GenerationResult RunGenerations(CoordinatorLink* client, TrainingContext* context, v1::JoinGenerationResponse first,
                                const GenerationLoopOptions& options);

}  // namespace herd
