// The seam between one generation and the job's state, as torchft's
// Manager is: where the generation starts, what a commit point keeps, and
// whether the generation ends at a step boundary. The trainer's step loop
// calls it at three places: Start, CommitPoint's Agree/Commit, and Vote.
//
// - Start heals: the ranks pick the newest commit any of them holds and its
//   holder broadcasts it (generation/healing.h); with none, the newest
//   checkpoint, else rank 0's fresh parameters. The starting state is the
//   generation's first commit.
// - A commit point checks that replicas agree (one all-gather of hashes,
//   carrying each rank's step times), holds the state in memory (what the
//   next generation heals from) and saves a checkpoint when due.
// - The release vote ends the generation where any rank leaves or the job
//   re-forms (generation/release_vote.h); when every rank leaves, only once
//   their checkpoint is recorded.
#pragma once

#include <torch/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/herd.pb.h"
#include "worker/comm/communicator.h"
#include "worker/contract/generation_outcome.h"
#include "worker/train/checkpoint/checkpoint_keeper.h"
#include "worker/train/generation/healing.h"
#include "worker/train/report/straggler.h"
#include "worker/train/sync/sync_strategy.h"
#include "worker/train/training_context.h"

namespace herd {

class GenerationManager {
 public:
  // All must outlive the manager; `control` is the generation's control
  // communicator (hashes, healing, votes), `sync` its sync strategy.
  GenerationManager(TrainingContext* context, const v1::JoinGenerationResponse* join, Communicator* control,
                    SyncStrategy* sync);

  // Where the generation starts, restored into the context, and its first
  // commit.
  absl::Status Start();
  // With 2+ ranks, one all-gather: every rank's hash of `replica_state`
  // (checked: a mismatch fails) and step times of the interval, by rank.
  // One rank: none.
  absl::StatusOr<std::vector<RankStepTimes>> Agree(const std::vector<torch::Tensor>& replica_state,
                                                   const RankStepTimes& mine);
  // Holds the state in memory and saves a checkpoint when due (the saving
  // rank); at the final one, waits for every write.
  absl::Status Commit(bool final);
  // Whether the generation ends at this boundary (nullopt: it goes on).
  absl::StatusOr<std::optional<GenerationResult>> Vote();
  // What the coordinator answered the reporter: fenced or cancelled.
  absl::Status Verdict() const;

 private:
  absl::Status ChooseStartingState();
  absl::Status Heal(const HealSource& source);
  absl::Status StartFresh();
  absl::Status RestoreFiles(const std::map<std::string, std::string>& files);
  absl::Status RestoreOwnCommit();
  absl::Status ResumeAt(const TrainingPosition& position, const std::vector<torch::Tensor>& outer,
                        const std::vector<torch::Tensor>& rank_state);
  absl::Status HoldInMemory();
  // Every rank leaves: rank 0 checkpoints this step and waits for the
  // coordinator to record it; true on every rank once it did.
  absl::StatusOr<bool> CheckpointForAllLeaving();
  CheckpointState SaveState() const;
  bool Saving() const { return join_.rank() == 0; }

  TrainingContext& ctx_;
  const v1::JoinGenerationResponse& join_;
  Communicator* const comm_;
  SyncStrategy* const sync_;
};

}  // namespace herd
