#include "worker/contract/generation_outcome.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "absl/strings/cord.h"
#include "proto/herd.pb.h"

namespace herd {
namespace {

const std::vector<GenerationOutcome>& AllOutcomes() {
  static const std::vector<GenerationOutcome> all = {
      GenerationOutcome::kCompleted,    GenerationOutcome::kReleased,         GenerationOutcome::kReleasedAll,
      GenerationOutcome::kPeerReleased, GenerationOutcome::kReformed,         GenerationOutcome::kFenced,
      GenerationOutcome::kGenerationFailed, GenerationOutcome::kJobFailed, GenerationOutcome::kMemberFailed,
  };
  return all;
}

// The outcomes a trainer exits with: every one that does not go on into
// the next generation.
std::vector<GenerationOutcome> ExitOutcomes() {
  std::vector<GenerationOutcome> exits;
  for (GenerationOutcome outcome : AllOutcomes()) {
    if (!JoinsNextGeneration(outcome)) exits.push_back(outcome);
  }
  return exits;
}

TEST(ClassifyStatus, EachStatusCodeFallsInTheClassItsRetryDecisionNeeds) {
  EXPECT_EQ(ClassifyStatus(absl::OkStatus()), GenerationOutcome::kCompleted);
  EXPECT_EQ(ClassifyStatus(absl::FailedPreconditionError("fenced")), GenerationOutcome::kFenced);
  for (const absl::Status& retryable : {absl::UnavailableError("peer gone"), absl::DeadlineExceededError("timeout"),
                                        absl::AbortedError("collective aborted")}) {
    EXPECT_EQ(ClassifyStatus(retryable), GenerationOutcome::kGenerationFailed) << retryable;
  }
  for (const absl::Status& repeats :
       {absl::InvalidArgumentError("bad spec"), absl::NotFoundError("no dataset"), absl::DataLossError("corrupt"),
        absl::UnimplementedError("no such model"), absl::ResourceExhaustedError("out of memory"),
        absl::PermissionDeniedError("storage")}) {
    EXPECT_EQ(ClassifyStatus(repeats), GenerationOutcome::kJobFailed) << repeats;
  }
  for (const absl::Status& other : {absl::InternalError("bug"), absl::UnknownError("?"),
                                    absl::CancelledError("the job was cancelled"), absl::OutOfRangeError("x"),
                                    absl::AlreadyExistsError("x"), absl::UnauthenticatedError("x")}) {
    EXPECT_EQ(ClassifyStatus(other), GenerationOutcome::kMemberFailed) << other;
  }
}

// A status never says the generation ended at a boundary, whatever its
// code or payload: only the vote does.
TEST(ClassifyStatus, NeverReadsABoundaryFromAStatus) {
  absl::Status aborted = absl::AbortedError("released: left the job after committing step 7");
  aborted.SetPayload("herd.dev/release", absl::Cord("self"));
  EXPECT_EQ(ClassifyStatus(aborted), GenerationOutcome::kGenerationFailed);
  EXPECT_FALSE(IsBoundary(GenerationResult::Of(aborted).outcome));
}

TEST(GenerationOutcome, TheLoopGoesOnAfterPeerLeavesReformsAndGenerationFailuresOnly) {
  std::set<GenerationOutcome> joins;
  for (GenerationOutcome outcome : AllOutcomes()) {
    if (JoinsNextGeneration(outcome)) joins.insert(outcome);
  }
  EXPECT_EQ(joins, (std::set<GenerationOutcome>{GenerationOutcome::kPeerReleased, GenerationOutcome::kReformed,
                                                 GenerationOutcome::kFenced, GenerationOutcome::kGenerationFailed}));
  EXPECT_TRUE(WritesFinalReport(GenerationOutcome::kCompleted));
  EXPECT_TRUE(WritesFinalReport(GenerationOutcome::kReleased));
  EXPECT_TRUE(WritesFinalReport(GenerationOutcome::kReleasedAll));
  EXPECT_FALSE(WritesFinalReport(GenerationOutcome::kJobFailed));
  EXPECT_FALSE(WritesFinalReport(GenerationOutcome::kMemberFailed));
}

TEST(TrainerExitCode, EachExitOutcomeHasItsOwnCodeAndTheCodeReadsBackAsIt) {
  std::set<int> codes;
  for (GenerationOutcome outcome : ExitOutcomes()) {
    const int code = TrainerExitCode(outcome);
    EXPECT_TRUE(codes.insert(code).second) << OutcomeName(outcome) << " shares exit code " << code;
    EXPECT_EQ(OutcomeOfExitCode(code), outcome) << OutcomeName(outcome) << " -> " << code;
  }
  EXPECT_EQ(codes.size(), 5u);
}

TEST(TrainerExitCode, TheCodesAreTheProtosTrainerExitCodes) {
  EXPECT_EQ(TrainerExitCode(GenerationOutcome::kCompleted), v1::TRAINER_EXIT_OK);
  EXPECT_EQ(TrainerExitCode(GenerationOutcome::kJobFailed), v1::TRAINER_EXIT_JOB_ERROR);
  EXPECT_EQ(TrainerExitCode(GenerationOutcome::kReleased), v1::TRAINER_EXIT_RELEASED);
  EXPECT_EQ(TrainerExitCode(GenerationOutcome::kReleasedAll), v1::TRAINER_EXIT_RELEASED_ALL);
  EXPECT_EQ(TrainerExitCode(GenerationOutcome::kMemberFailed), 1);
}

// A trainer that gives up waiting for the next generation exits as a failed
// member, as any other crash.
TEST(TrainerExitCode, AnOutcomeThatJoinsTheNextGenerationExitsAsAMemberFailure) {
  for (GenerationOutcome outcome : AllOutcomes()) {
    if (!JoinsNextGeneration(outcome)) continue;
    EXPECT_EQ(TrainerExitCode(outcome), TrainerExitCode(GenerationOutcome::kMemberFailed)) << OutcomeName(outcome);
  }
}

TEST(OutcomeOfExitCode, UnknownCodesAndSignalsAreMemberFailures) {
  for (int code : {2, 6, 7, 42, 255, -9, -15}) {
    EXPECT_EQ(OutcomeOfExitCode(code), GenerationOutcome::kMemberFailed) << code;
  }
}

TEST(Describe, BoundariesAreWordedFromTheOutcomeAndFailuresKeepTheirMessage) {
  EXPECT_EQ(Describe(GenerationResult::AtBoundary(GenerationOutcome::kReleased, 40)),
            "released: left the job after committing step 40");
  EXPECT_EQ(Describe(GenerationResult::AtBoundary(GenerationOutcome::kReleasedAll, 40)),
            "released: every rank left the job after committing step 40, which rank 0 checkpointed");
  EXPECT_EQ(Describe(GenerationResult::AtBoundary(GenerationOutcome::kPeerReleased, 40, 1)),
            "1 rank left the job after step 40 was committed");
  EXPECT_EQ(Describe(GenerationResult::AtBoundary(GenerationOutcome::kPeerReleased, 40, 2)),
            "2 ranks left the job after step 40 was committed");
  EXPECT_EQ(Describe(GenerationResult::AtBoundary(GenerationOutcome::kReformed, 40)),
            "the job re-forms after step 40 was committed, so workers can join");
  EXPECT_EQ(Describe(GenerationResult::Of(absl::OkStatus())), "training finished");
  const GenerationResult failed = GenerationResult::Of(absl::UnavailableError("peer 2 is gone"));
  EXPECT_EQ(failed.outcome, GenerationOutcome::kGenerationFailed);
  EXPECT_EQ(Describe(failed), "peer 2 is gone");
}

TEST(OutcomeName, EveryOutcomeHasItsOwnName) {
  std::set<std::string> names;
  for (GenerationOutcome outcome : AllOutcomes()) {
    EXPECT_TRUE(names.insert(std::string(OutcomeName(outcome))).second) << OutcomeName(outcome);
  }
}

}  // namespace
}  // namespace herd
