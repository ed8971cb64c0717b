#include "worker/contract/generation_outcome.h"

#include "absl/strings/str_cat.h"
#include "proto/herd.pb.h"

namespace herd {
namespace {

// The exit codes, both ways: one row per outcome a trainer exits with.
struct ExitRow {
  GenerationOutcome outcome;
  int code;
};
constexpr ExitRow kExitCodes[] = {
    {GenerationOutcome::kCompleted, v1::TRAINER_EXIT_OK},
    {GenerationOutcome::kMemberFailed, 1},
    {GenerationOutcome::kJobFailed, v1::TRAINER_EXIT_JOB_ERROR},
    {GenerationOutcome::kReleased, v1::TRAINER_EXIT_RELEASED},
    {GenerationOutcome::kReleasedAll, v1::TRAINER_EXIT_RELEASED_ALL},
};

}  // namespace

GenerationOutcome ClassifyStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return GenerationOutcome::kCompleted;
    case absl::StatusCode::kFailedPrecondition:
      return GenerationOutcome::kFenced;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
      return GenerationOutcome::kGenerationFailed;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kPermissionDenied:
      return GenerationOutcome::kJobFailed;
    default:
      return GenerationOutcome::kMemberFailed;
  }
}

bool JoinsNextGeneration(GenerationOutcome outcome) {
  switch (outcome) {
    case GenerationOutcome::kPeerReleased:
    case GenerationOutcome::kReformed:
    case GenerationOutcome::kFenced:
    case GenerationOutcome::kGenerationFailed:
      return true;
    default:
      return false;
  }
}

bool IsBoundary(GenerationOutcome outcome) {
  switch (outcome) {
    case GenerationOutcome::kReleased:
    case GenerationOutcome::kReleasedAll:
    case GenerationOutcome::kPeerReleased:
    case GenerationOutcome::kReformed:
      return true;
    default:
      return false;
  }
}

bool WritesFinalReport(GenerationOutcome outcome) {
  return outcome == GenerationOutcome::kCompleted || outcome == GenerationOutcome::kReleased ||
         outcome == GenerationOutcome::kReleasedAll;
}

int TrainerExitCode(GenerationOutcome outcome) {
  for (const ExitRow& row : kExitCodes) {
    if (row.outcome == outcome) return row.code;
  }
  return TrainerExitCode(GenerationOutcome::kMemberFailed);
}

GenerationOutcome OutcomeOfExitCode(int exit_code) {
  for (const ExitRow& row : kExitCodes) {
    if (row.code == exit_code) return row.outcome;
  }
  return GenerationOutcome::kMemberFailed;
}

absl::string_view OutcomeName(GenerationOutcome outcome) {
  switch (outcome) {
    case GenerationOutcome::kCompleted:
      return "completed";
    case GenerationOutcome::kReleased:
      return "released";
    case GenerationOutcome::kReleasedAll:
      return "released all";
    case GenerationOutcome::kPeerReleased:
      return "peer released";
    case GenerationOutcome::kReformed:
      return "re-formed";
    case GenerationOutcome::kFenced:
      return "fenced";
    case GenerationOutcome::kGenerationFailed:
      return "generation failed";
    case GenerationOutcome::kJobFailed:
      return "job failed";
    case GenerationOutcome::kMemberFailed:
      return "member failed";
  }
  return "unknown";
}

GenerationResult GenerationResult::AtBoundary(GenerationOutcome outcome, int64_t step, int leavers) {
  GenerationResult end;
  end.outcome = outcome;
  end.step = step;
  end.leavers = leavers;
  return end;
}

GenerationResult GenerationResult::Of(absl::Status status) {
  GenerationResult end;
  end.outcome = ClassifyStatus(status);
  end.error = std::move(status);
  return end;
}

std::string Describe(const GenerationResult& end) {
  switch (end.outcome) {
    case GenerationOutcome::kCompleted:
      return "training finished";
    case GenerationOutcome::kReleased:
      return absl::StrCat("released: left the job after committing step ", end.step);
    case GenerationOutcome::kReleasedAll:
      return absl::StrCat("released: every rank left the job after committing step ", end.step,
                          ", which rank 0 checkpointed");
    case GenerationOutcome::kPeerReleased:
      return absl::StrCat(end.leavers, end.leavers == 1 ? " rank" : " ranks", " left the job after step ", end.step,
                          " was committed");
    case GenerationOutcome::kReformed:
      return absl::StrCat("the job re-forms after step ", end.step, " was committed, so workers can join");
    default:
      return std::string(end.error.message());
  }
}

}  // namespace herd
