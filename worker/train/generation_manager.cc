#include "worker/train/generation_manager.h"

#include <glog/logging.h>

#include <algorithm>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/train/checkpoint/training_state.h"
#include "worker/train/generation/release_vote.h"
#include "worker/train/sync/replicas.h"

namespace herd {

GenerationManager::GenerationManager(TrainingContext* context, const v1::JoinGenerationResponse* join,
                                     Communicator* control, SyncStrategy* sync)
    : ctx_(*context), join_(*join), comm_(control), sync_(sync) {}

absl::Status GenerationManager::Start() {
  if (auto s = ChooseStartingState(); !s.ok()) return s;
  // Sync starts from the parameters training starts from (healed, restored or broadcast).
  sync_->StartFromCurrentParameters();
  // The generation's starting state is its first commit.
  return HoldInMemory();
}

absl::Status GenerationManager::ChooseStartingState() {
  const CommittedState& committed = ctx_.committed();
  const bool holding = !committed.snapshot.empty();
  auto source = ChooseHealSource(comm_, holding ? committed.generation : -1, holding ? committed.step : -1);
  if (!source.ok()) return source.status();
  if (source->rank >= 0) return Heal(*source);
  return StartFresh();
}

absl::Status GenerationManager::Heal(const HealSource& source) {
  // Survivors roll back to the newest commit any of them holds; joiners
  // receive it: parameters, optimizer, RNG, sampler position and step. A
  // rank holding that very commit restores its own copy: the same
  // parameters and outer state, and its own inner optimizer state (which
  // sync mode average keeps local to each rank).
  const CommittedState& committed = ctx_.committed();
  const bool mine = !committed.snapshot.empty() && committed.generation == source.generation &&
                    committed.step == source.step;
  if (!source.held_by_all) {
    std::map<std::string, std::string> files;
    if (source.rank == static_cast<int>(join_.rank())) {
      TrainingPosition position;
      std::vector<torch::Tensor> outer;
      if (auto s = committed.snapshot.Apply(ctx_.model(), ctx_.optimizer(), &position, &outer); !s.ok()) return s;
      auto serialized = SerializeTrainingState(ctx_.model(), ctx_.optimizer(), position, outer);
      if (!serialized.ok()) return serialized.status();
      files = std::move(*serialized);
    }
    if (auto s = BroadcastFiles(comm_, source.rank, &files); !s.ok()) return s;
    if (!mine) {
      if (auto s = RestoreFiles(files); !s.ok()) return s;
    }
  }
  if (mine) {
    if (auto s = RestoreOwnCommit(); !s.ok()) return s;
  }
  const TrainingPosition& pos = ctx_.position();
  LOG(INFO) << "generation " << join_.generation() << ": healed from "
            << (mine ? std::string("its own") : absl::StrCat("rank ", source.rank, "'s")) << " commit in memory at step "
            << pos.step << " (epoch " << pos.epoch << ", " << pos.samples_in_epoch << " samples into it)"
            << (source.held_by_all ? "; every rank held it, nothing sent" : "");
  return absl::OkStatus();
}

absl::Status GenerationManager::StartFresh() {
  // Nobody holds a commit: every rank starts from rank 0's parameters,
  // whatever its own init did, then from the newest checkpoint if any.
  if (auto s = BroadcastParameters(comm_, ctx_.params(), 0); !s.ok()) return s;
  ctx_.position() = TrainingPosition{};
  if (!join_.checkpoint_path().empty()) {
    return ctx_.checkpoints().RestoreNewest(
        join_.checkpoint_path(),
        [this](const std::map<std::string, std::string>& files) -> absl::StatusOr<TrainingPosition> {
          if (auto s = RestoreFiles(files); !s.ok()) return s;
          return ctx_.position();
        });
  }
  if (join_.start_step() > 0) {
    return absl::DataLossError(absl::StrCat("generation ", join_.generation(), " resumes at step ", join_.start_step(),
                                            " but no member holds the training state and the job has no checkpoint "
                                            "to resume from (set checkpoint.interval_steps)"));
  }
  return absl::OkStatus();
}

absl::Status GenerationManager::RestoreFiles(const std::map<std::string, std::string>& files) {
  TrainingPosition position;
  std::vector<torch::Tensor> outer_state;
  if (auto s = RestoreTrainingState(files, ctx_.model(), ctx_.optimizer(), &position, &outer_state); !s.ok()) return s;
  // The outer optimizer (parameter averaging) resumes with its momentum;
  // the sync's per-rank state (int8 residuals) was another rank's: zeroed.
  return ResumeAt(position, outer_state, {});
}

absl::Status GenerationManager::RestoreOwnCommit() {
  TrainingPosition position;
  std::vector<torch::Tensor> outer;
  std::vector<torch::Tensor> own;
  if (auto s = ctx_.committed().snapshot.Apply(ctx_.model(), ctx_.optimizer(), &position, &outer, &own); !s.ok()) {
    return s;
  }
  return ResumeAt(position, outer, own);
}

absl::Status GenerationManager::ResumeAt(const TrainingPosition& position, const std::vector<torch::Tensor>& outer,
                                         const std::vector<torch::Tensor>& rank_state) {
  if (auto s = sync_->Resume(outer, rank_state); !s.ok()) return s;
  ctx_.position() = position;
  return absl::OkStatus();
}

absl::Status GenerationManager::HoldInMemory() {
  return sync_->Capture(ctx_.model(), ctx_.optimizer(), ctx_.position(), join_.generation(), &ctx_.committed());
}

absl::StatusOr<std::vector<RankStepTimes>> GenerationManager::Agree(const std::vector<torch::Tensor>& replica_state,
                                                                    const RankStepTimes& mine) {
  if (comm_->size() < 2) return std::vector<RankStepTimes>{};
  // Trivially copyable, no padding: every rank runs the same herd-trainer.
  struct CommitShare {
    uint64_t hash;
    double compute_seconds;
    double wait_seconds;
    int64_t steps;
  };
  static_assert(std::is_trivially_copyable_v<CommitShare> && sizeof(CommitShare) == 32);
  const CommitShare share{ParameterHash(replica_state), mine.compute_seconds, mine.wait_seconds, mine.steps};
  std::vector<CommitShare> all(comm_->size());
  if (auto s = comm_->AllGather(&share, sizeof(share), all.data()); !s.ok()) return s;
  std::vector<uint64_t> hashes;
  std::vector<RankStepTimes> times;
  for (const CommitShare& each : all) {
    hashes.push_back(each.hash);
    times.push_back({each.compute_seconds, each.wait_seconds, each.steps});
  }
  if (auto s = CheckReplicaHashes(hashes, ctx_.position().step); !s.ok()) return s;
  return times;
}

absl::Status GenerationManager::Commit(bool final) {
  // Held in memory: what the next generation heals from if this one fails.
  if (auto s = HoldInMemory(); !s.ok()) return s;
  return ctx_.checkpoints().AtCommit(final, Saving(), ctx_.position().step, [this] { return SaveState(); });
}

CheckpointState GenerationManager::SaveState() const {
  return CheckpointState{ctx_.model(),      ctx_.optimizer(),     ctx_.position(), sync_->OuterState(),
                         join_.generation(), ctx_.progress().learning_rate()};
}

absl::StatusOr<std::optional<GenerationResult>> GenerationManager::Vote() {
  const LeaveRequest asked = ctx_.options().leave_request();
  const std::vector<int64_t> heard =
      asked.generation == join_.generation() ? asked.ranks : std::vector<int64_t>{};  // older: stale
  const auto& reform_asked = ctx_.options().reform_requested_generation;
  const bool reform = reform_asked && reform_asked() == join_.generation();
  auto vote = TakeBoundaryVote(comm_, heard, reform);
  if (!vote.ok()) return vote.status();
  const int64_t step = ctx_.position().step;
  const int leavers = static_cast<int>(vote->leavers.size());
  if (leavers == join_.world_size()) {
    auto checkpointed = CheckpointForAllLeaving();
    if (!checkpointed.ok()) return checkpointed.status();
    if (!*checkpointed) {
      // Leaving now would cost the steps since the last recorded
      // checkpoint: stay, and vote again at the next commit point.
      LOG_IF(WARNING, join_.rank() == 0) << "every rank is asked to leave after step " << step
                                         << ", but its checkpoint is not recorded; training on";
      return std::nullopt;
    }
    LOG(INFO) << "rank " << join_.rank() << ": every rank leaves after step " << step << ", checkpointed";
    return GenerationResult::AtBoundary(GenerationOutcome::kReleasedAll, step);
  }
  if (leavers > 0) {
    // Every rank committed this step and saw the same set: the leavers go,
    // the others re-form from this commit.
    const bool leaving = std::count(vote->leavers.begin(), vote->leavers.end(), join_.rank()) > 0;
    LOG(INFO) << "rank " << join_.rank() << ": rank(s) " << absl::StrJoin(vote->leavers, ",") << " leave after step "
              << step << (leaving ? ", this one included" : "");
    return GenerationResult::AtBoundary(leaving ? GenerationOutcome::kReleased : GenerationOutcome::kPeerReleased,
                                        step, leavers);
  }
  if (vote->reformers > 0) {
    LOG(INFO) << "rank " << join_.rank() << ": the job re-forms after step " << step << " so workers can join";
    return GenerationResult::AtBoundary(GenerationOutcome::kReformed, step);
  }
  return std::nullopt;
}

absl::StatusOr<bool> GenerationManager::CheckpointForAllLeaving() {
  bool recorded = false;
  ProgressReporter* reporter = ctx_.reporter();
  if (Saving() && reporter != nullptr) {
    const int64_t step = ctx_.position().step;
    const absl::Status saved = ctx_.checkpoints().SaveAndWait(SaveState());
    if (saved.ok() && ctx_.checkpoints().Holds(step)) {
      // The peers wait in the next collective meanwhile: stay well inside
      // its timeout.
      const auto wait = std::min<std::chrono::milliseconds>(std::chrono::seconds(30), ctx_.CollectiveTimeout() / 2);
      reporter->Flush(wait);
      recorded = reporter->recorded_checkpoint_step() == step;
    } else if (!saved.ok()) {
      LOG(WARNING) << "checkpoint of step " << step << " for leaving failed: " << saved;
    }
  }
  return AgreeOnCheckpoint(comm_, join_.rank(), recorded);
}

absl::Status GenerationManager::Verdict() const {
  const ProgressReporter* reporter = ctx_.reporter();
  if (reporter == nullptr) return absl::OkStatus();
  if (reporter->cancelled()) return absl::CancelledError("the job was cancelled");
  if (reporter->fenced_generation() >= join_.generation()) {
    // A newer generation exists (a worker joined or left, a peer failed).
    return absl::FailedPreconditionError(
        absl::StrCat("generation ", join_.generation(), " was superseded (the coordinator fenced it)"));
  }
  return absl::OkStatus();
}

}  // namespace herd
