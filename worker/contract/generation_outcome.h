// How a trainer's generation ended, as one enum: what the trainer does next
// (join the next generation, or exit) and the exit code the daemon and the
// coordinator read (v1::TrainerExitCode in proto/herd.proto). The trainer
// decides on the outcome and the daemon on the exit code, never on text:
// messages are derived from the outcome (Describe).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace herd {

// How a generation ended for one trainer: what it does next and its exit code.
enum class GenerationOutcome {
  // Training finished (exit 0).
  kCompleted,
  // At a step boundary every rank committed: this rank left the job, as the
  // coordinator asked (drain, shrink); the job goes on without it.
  kReleased,
  // Every rank left at one boundary, which rank 0 checkpointed and the
  // coordinator recorded first (suspension, draining every worker).
  kReleasedAll,
  // Other ranks left at a boundary: this one joins the next generation from
  // its own commit of that step. Nothing failed.
  kPeerReleased,
  // Nobody left, but the job re-forms at a boundary so idle workers can join:
  // every rank joins the next generation. Nothing failed.
  kReformed,
  // The coordinator fenced the generation (FAILED_PRECONDITION): a newer one
  // exists already, so the trainer joins it without reporting.
  kFenced,
  // A collective or the coordinator failed or timed out (UNAVAILABLE,
  // DEADLINE_EXCEEDED, ABORTED): the trainer reports it and joins the next
  // generation, keeping its job context.
  kGenerationFailed,
  // A failure another generation would repeat (INVALID_ARGUMENT, NOT_FOUND,
  // DATA_LOSS, UNIMPLEMENTED, RESOURCE_EXHAUSTED, PERMISSION_DENIED: bad
  // input, lost state, out of memory, storage under checkpoint.on_failure:
  // fail): the coordinator fails the job at once, spending no restart budget.
  kJobFailed,
  // Any other failure (a crash, a signal, INTERNAL, a cancelled job): this
  // member failed, and the coordinator re-forms the job within its restart
  // budget. A trainer whose generation failed and whose next generation
  // never formed exits with this code too (TrainerExitCode).
  kMemberFailed,
};

// The outcome of a generation (or a trainer's start-up) that ended with
// `status` rather than at a step boundary: kCompleted when it is OK, else
// the failure class of its code. Boundaries are never read from a status.
GenerationOutcome ClassifyStatus(const absl::Status& status);

// Whether the trainer goes on into the next generation, keeping its job
// context: a boundary other ranks left at or re-form at, or a generation
// failure.
bool JoinsNextGeneration(GenerationOutcome outcome);

// Whether the generation ended at a step boundary every rank agreed on.
bool IsBoundary(GenerationOutcome outcome);

// Whether the trainer leaves its last progress report in the final-report
// file (trainer_contract.h) with this exit: it finished or was released.
bool WritesFinalReport(GenerationOutcome outcome);

// The trainer's exit code when `outcome` ends it. One code per outcome the
// trainer exits with (kCompleted, kReleased, kReleasedAll, kJobFailed,
// kMemberFailed); an outcome that would join the next generation ends the
// trainer only when no next generation formed, a member failure.
int TrainerExitCode(GenerationOutcome outcome);

// What a trainer's exit code says, for its daemon: the inverse of
// TrainerExitCode; any other code (a crash, -N for signal N) is
// kMemberFailed.
GenerationOutcome OutcomeOfExitCode(int exit_code);

// A short name for logs and tests ("released", "member failed").
absl::string_view OutcomeName(GenerationOutcome outcome);

// What Trainer::Run and RunGenerations (the generation loop) return: the
// GenerationOutcome, with the step boundary's details or the failure.
struct GenerationResult {
  GenerationOutcome outcome = GenerationOutcome::kCompleted;
  // At a boundary: the step every rank committed, and how many ranks left.
  int64_t step = 0;
  int leavers = 0;
  // The failure; OK when training completed or ended at a boundary.
  absl::Status error;

  static GenerationResult AtBoundary(GenerationOutcome outcome, int64_t step, int leavers = 0);
  // Classified by ClassifyStatus.
  static GenerationResult Of(absl::Status status);
};

// What to tell the user: the boundary in words, or the error's message.
std::string Describe(const GenerationResult& end);

}  // namespace herd
