#include "worker/train/sync/sync_strategy.h"

#include <glog/logging.h>

#include <algorithm>
#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/train/optim/grad_clip.h"
#include "worker/train/sync/overlap_controller.h"
#include "worker/train/sync/island_sync.h"
#include "worker/train/sync/parameter_averaging.h"
#include "worker/train/optim/sharded_optimizer.h"
#include "worker/comm/peer_fault.h"

namespace herd {
namespace {

std::string RateSummary(const SyncTraffic& t) {
  return absl::StrFormat("%d samples in %.1f s of training (%.1f samples/s)", t.samples, t.train_seconds,
                         t.SamplesPerSecond());
}

// tau before anything is measured: fixed, or with auto the spacing of the
// fragments' launches (a round lands when the next fragment launches).
int64_t InitialOverlapSteps(const SyncConfig& config) {
  if (!config.overlap_auto) return config.overlap_steps;
  return std::clamp<int64_t>(config.every / std::max(1, config.fragments), 1, std::max<int64_t>(1, config.every));
}

OverlapBounds OverlapBoundsOf(const SyncConfig& config) {
  OverlapBounds bounds;
  bounds.min_steps = 1;
  bounds.max_steps = std::max<int64_t>(1, config.every);
  return bounds;
}

// The median of the last few values: one round slowed by a busy machine
// does not move tau.
class RecentMedian {
 public:
  void Add(double value) {
    values_.push_back(value);
    if (values_.size() > kKept) values_.erase(values_.begin());
  }
  bool full() const { return values_.size() >= kKept; }
  double Median() const {
    if (values_.empty()) return 0;
    std::vector<double> sorted = values_;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }

 private:
  static constexpr size_t kKept = 5;
  std::vector<double> values_;
};

// A local step's wall time, from the end of one step boundary's sync work
// to the end of the next step: the median of the steps since the last
// reading, so a commit or an evaluation in between does not count as a step.
class StepClock {
 public:
  void Restart() { from_ = std::chrono::steady_clock::now(); }
  // The next StepEnded does not count (nothing ran a step since).
  void Forget() { from_ = {}; }
  void StepEnded() {
    const auto now = std::chrono::steady_clock::now();
    if (from_.time_since_epoch().count() != 0) samples_.push_back(std::chrono::duration<double>(now - from_).count());
    from_ = now;
  }
  // Since the last call; the previous reading when no step ended in between.
  double MedianSeconds() {
    if (!samples_.empty()) {
      auto middle = samples_.begin() + static_cast<std::ptrdiff_t>(samples_.size() / 2);
      std::nth_element(samples_.begin(), middle, samples_.end());
      last_ = *middle;
      samples_.clear();
    }
    return last_;
  }

 private:
  std::chrono::steady_clock::time_point from_;
  std::vector<double> samples_;
  double last_ = 0;
};

GradientSyncOptions GradientOptions(const SyncConfig& config) {
  GradientSyncOptions options;
  options.first_bucket_mib = config.first_bucket_mib;
  options.bucket_cap_mib = config.bucket_cap_mib;
  options.wire_type = config.wire_type;
  // ZeRO-1: each rank needs the summed gradient of its own shard only.
  options.reduce_scatter = config.shard_optimizer;
  return options;
}

class AllReduceStrategy : public SyncStrategy {
 public:
  AllReduceStrategy(std::vector<torch::Tensor> params, Communicator* data, const SyncConfig& config)
      : SyncStrategy(std::move(params), data, config) {}

  bool LocalStep(int64_t) const override { return false; }

  absl::Status AfterStep(bool, const StepBoundary&, SyncTraffic* traffic) override {
    CountAllReduceStep(traffic);
    return absl::OkStatus();
  }

  bool CommitDue(const StepBoundary& at, int64_t, int64_t log_interval) const override {
    return at.done || at.step % log_interval == 0;
  }

  void StartFromCurrentParameters() override {}
  std::vector<torch::Tensor> OuterState() const override { return {}; }

  std::string Describe() const override { return "sync allreduce: every step's gradients are summed"; }

  std::string TrafficSummary(const SyncTraffic& t) const override {
    return absl::StrFormat("all-reduce: %d steps, %d bytes sent (%.1f bytes/sample); %s; waited %.1f s (%.1f%%) "
                           "for the all-reduce after backward",
                           t.allreduce_steps, t.wire_bytes, t.BytesPerSample(), RateSummary(t),
                           t.allreduce_wait_seconds,
                           t.train_seconds > 0 ? 100 * t.allreduce_wait_seconds / t.train_seconds : 0.0);
  }

 protected:
  // A checkpoint written in mode average resumes here without its outer momentum.
  absl::Status RestoreOuterState(const std::vector<torch::Tensor>&) override { return absl::OkStatus(); }
};

// ZeRO-1 (sync.shard_optimizer): the gradients are reduce-scattered, each
// rank clips and steps its own range, and the ranges are all-gathered.
class ShardedAllReduceStrategy : public AllReduceStrategy {
 public:
  // Each rank owns what the gradient reduce-scatter sums for it.
  static absl::StatusOr<std::unique_ptr<SyncStrategy>> Create(std::vector<torch::Tensor> params,
                                                              Communicator* data, const SyncConfig& config) {
    std::unique_ptr<ShardedAllReduceStrategy> strategy(new ShardedAllReduceStrategy(params, data, config));
    auto shards = OptimizerShards::Create(std::move(params), data, strategy->gradients_->scattered_pieces());
    if (!shards.ok()) return shards.status();
    strategy->shards_ = std::move(*shards);
    return std::unique_ptr<SyncStrategy>(std::move(strategy));
  }

  absl::Status Update(bool local, const UpdateInputs& in) override {
    if (in.device_lr.defined()) {
      return absl::FailedPreconditionError("sync.shard_optimizer steps with the host's learning rate");
    }
    if (auto s = FinishGradients(local, in.step); !s.ok()) return s;
    if (auto skip = AgreeToSkip(in); !skip.ok() || *skip) return skip.status();
    if (in.grad_clip_norm > 0) {
      // Each rank holds the summed gradient of its own pieces only: the norm
      // comes from every rank's pieces.
      if (auto norm = shards_->ClipGradNorm(in.grad_clip_norm); !norm.ok()) {
        return AtStep(norm.status(), "gradient norm all-reduce", in.step);
      }
    }
    // This rank steps its own range; the owners' results are all-gathered.
    if (auto s = shards_->StepOwnRange(*in.optimizer); !s.ok()) return s;
    if (auto s = shards_->ShareParameters(); !s.ok()) return AtStep(s, "parameter all-gather", in.step);
    return absl::OkStatus();
  }

  absl::Status AfterStep(bool, const StepBoundary&, SyncTraffic* traffic) override {
    CountAllReduceStep(traffic);
    Count(traffic, shards_->share_wire_bytes(), 0);
    return absl::OkStatus();
  }

  std::string Describe() const override {
    return absl::StrCat(
        "sync allreduce: every step's gradients are summed, reduce-scattered (each rank its shard); ",
        shards_->Describe());
  }

 protected:
  absl::Status GatherOptimizerState(torch::optim::Optimizer& optimizer) override {
    return shards_->GatherState(optimizer);
  }

 private:
  ShardedAllReduceStrategy(std::vector<torch::Tensor> params, Communicator* data, const SyncConfig& config)
      : AllReduceStrategy(std::move(params), data, config) {}

  std::unique_ptr<OptimizerShards> shards_;
};

class AveragingStrategy : public SyncStrategy {
 public:
  AveragingStrategy(std::vector<torch::Tensor> params, Communicator* data, const SyncConfig& config,
                    std::unique_ptr<AveragingRounds> averaging)
      : SyncStrategy(std::move(params), data, config), config_(config), averaging_(std::move(averaging)) {
    ResetSamples();
    // Two ranks gather from the start (no more bytes, fewer hops); where
    // these rounds cannot gather (no int8, islands) they stay all-reduce.
    RoundShapeState initial;
    initial.shape = InitialRoundShape(averaging_->round_ranks());
    AdoptShape(initial);
  }

  // sync.islands_by: local steps sum their gradients over `island` (whose
  // ranks in the generation are `island_ranks`), so an island's replicas
  // stay identical between the rounds across islands.
  void SumLocalStepsOver(Communicator* island, std::vector<int> island_ranks, const SyncConfig& config) {
    island_gradients_ = std::make_unique<GradientSync>(params_, island, GradientOptions(config));
    island_ranks_ = std::move(island_ranks);
  }

  const std::vector<int>& GradientRanks(bool local) const override {
    return local && island_gradients_ != nullptr ? island_ranks_ : SyncStrategy::GradientRanks(local);
  }

  bool LocalStep(int64_t steps_done) const override { return steps_done >= config_.warmup_steps; }

  absl::Status AfterStep(bool local, const StepBoundary& at, SyncTraffic* traffic) override {
    if (!local) {
      CountAllReduceStep(traffic);
      // Replicas are identical after an all-reduce step: averaging (after
      // warmup) starts from here.
      averaging_->ResetAnchor();
      ResetSamples();
      in_sync_ = true;
      step_clock_.Restart();
      return absl::OkStatus();
    }
    for (FragmentSamples& samples : samples_) {
      samples.rank += at.rank_samples;
      samples.step += at.step_samples;
    }
    if (island_gradients_ != nullptr) {
      const GradientSyncStats& island = island_gradients_->last_stats();
      Count(traffic, island.wire_bytes, island.exposed_wait_seconds);
    }
    ++traffic->local_steps;
    ++local_steps_since_full_sync_;
    in_sync_ = false;
    step_clock_.StepEnded();
    // int8 rounds whose scale exchange had its share of the steps start
    // their data all-reduce; rounds whose tau steps have passed land.
    if (int advance = RoundsToAdvance(at.step); advance > 0) {
      if (auto s = averaging_->Advance(advance); !s.ok()) return Named(s, at);
    }
    if (int due = DueRounds(at.step); due > 0) {
      if (auto s = LandRounds(due, at, traffic); !s.ok()) return s;
    }
    if (FullSyncDue(at)) {
      if (averaging_->in_flight()) {
        if (auto s = LandRounds(static_cast<int>(rounds_.size()), at, traffic); !s.ok()) return s;
      }
      std::vector<double> weights;
      for (int f = 0; f < averaging_->fragments(); ++f) weights.push_back(TakeWeight(f));
      if (auto s = CountRound(averaging_->Round(weights), at, traffic); !s.ok()) return s;
      local_steps_since_full_sync_ = 0;
      in_sync_ = true;
      step_clock_.Restart();  // the full round is not a step
      return absl::OkStatus();
    }
    const int64_t phase = local_steps_since_full_sync_ % config_.every;
    const bool overlapped = config_.overlapped();
    for (int f = 0; f < averaging_->fragments(); ++f) {
      if (phase != FragmentPhase(f)) continue;
      RoundInFlight round;
      round.land_step = at.step + tau_;
      // With two or more steps to land in, the int8 scale exchange runs in
      // the background for the first third of them (RoundsToAdvance).
      round.advance_step = at.step + std::max<int64_t>(1, tau_ / 3);
      if (auto s = averaging_->Launch(f, /*keep_local_steps=*/overlapped, TakeWeight(f),
                                      /*overlap_scales=*/overlapped && tau_ >= 2,
                                      config_.overlap_auto ? Measurement() : std::vector<float>{});
          !s.ok()) {
        return Named(s, at);
      }
      if (overlapped) {
        rounds_.push_back(std::move(round));
      } else if (auto s = CountRound(averaging_->Finish(), at, traffic); !s.ok()) {
        return s;
      }
    }
    // One fragment synced without overlap is a full sync.
    in_sync_ = !config_.streaming() && phase == 0;
    step_clock_.Restart();  // the next step starts after this boundary's rounds
    return absl::OkStatus();
  }

  // Commits (replica hash check, progress report, checkpoint) need identical
  // replicas: after warmup they fall on the first full sync at least
  // log_interval steps after the previous commit, and on checkpoint steps.
  bool CommitDue(const StepBoundary& at, int64_t last_commit_step, int64_t log_interval) const override {
    if (!in_sync_) return false;
    if (at.done) return true;
    if (LocalStep(at.step)) return at.step - last_commit_step >= log_interval || at.checkpoint_due;
    return at.step % log_interval == 0;
  }

  void StartFromCurrentParameters() override {
    averaging_->ResetAnchor();
    DropRounds();
    step_clock_.Forget();
    ResetSamples();
    local_steps_since_full_sync_ = 0;
    in_sync_ = true;
  }
  std::vector<torch::Tensor> OuterState() const override { return averaging_->OuterState(); }

  std::string Describe() const override {
    std::string fragments =
        config_.fragments > 1 ? absl::StrCat(" in ", config_.fragments, " staggered fragments") : "";
    std::string overlap;
    if (config_.overlap_auto) {
      overlap = absl::StrCat(", merged tau step(s) after launch, tau chosen from measured round and step times "
                             "(overlap_steps: auto, between 1 and ", config_.every, ", starting at ", tau_, ")");
    } else if (config_.overlap_steps > 0) {
      overlap = absl::StrCat(", merged ", config_.overlap_steps, " step(s) after launch (overlap_steps)");
    }
    std::string islands;
    if (island_gradients_ != nullptr) {
      // Island gradients come only with island rounds (CreateIslandStrategy).
      const auto* rounds = static_cast<const IslandRounds*>(averaging_.get());
      islands = absl::StrCat(" across islands (local steps all-reduce over the island's ", island_ranks_.size(),
                             " ranks; each round averages ", rounds->shards().size(), " shard(s) in parallel, ",
                             rounds->owns_shard() ? "this rank one of them" : "this rank none", ")");
    }
    return absl::StrCat("sync average: a round every ", config_.every, " local steps", islands, fragments, " after ",
                        config_.warmup_steps, " all-reduce steps, outer ", OuterKindName(config_.outer.kind), overlap,
                        config_.int8_wire ? ", int8 wire with error feedback" : "");
  }

  std::string TrafficSummary(const SyncTraffic& t) const override {
    std::string summary = absl::StrFormat(
        "averaging: %d rounds, %d bytes sent (%.1f bytes/sample); %d local steps, %d all-reduce "
        "steps, %s; waited %.1f s (%.1f%%) for the network (rounds and all-reduce steps)",
        t.averaging_rounds, t.wire_bytes, t.BytesPerSample(), t.local_steps, t.allreduce_steps, RateSummary(t),
        t.allreduce_wait_seconds, t.train_seconds > 0 ? 100 * t.allreduce_wait_seconds / t.train_seconds : 0.0);
    absl::StrAppend(&summary, "; ", t.round_phases.Describe());
    if (config_.overlapped()) absl::StrAppend(&summary, "; overlap_steps ", tau_, config_.overlap_auto ? " (auto)" : "");
    if (config_.int8_wire) absl::StrAppend(&summary, "; int8 rounds ", RoundShapeName(shape_.shape));
    return summary;
  }

  SyncStatus Status() const override {
    SyncStatus status;
    status.overlap_steps = config_.overlapped() ? tau_ : 0;
    status.overlap_auto = config_.overlap_auto;
    status.round_seconds = measured_.round_seconds;
    status.step_seconds = measured_.step_seconds;
    status.warning = warning_;
    if (config_.int8_wire) status.round_shape = RoundShapeName(shape_.shape);
    return status;
  }

 protected:
  GradientSync* StepGradients(bool local) const override {
    return local && island_gradients_ != nullptr ? island_gradients_.get() : SyncStrategy::StepGradients(local);
  }
  absl::Status GatherOptimizerState(torch::optim::Optimizer&) override { return averaging_->GatherOuterState(); }
  absl::Status RestoreOuterState(const std::vector<torch::Tensor>& state) override {
    return state.empty() ? absl::OkStatus() : averaging_->RestoreOuterState(state);
  }
  std::vector<torch::Tensor> RankState() const override { return averaging_->Residuals(); }
  absl::Status RestoreRankState(const std::vector<torch::Tensor>& state) override {
    return averaging_->RestoreResiduals(state);
  }

 private:
  // A round launched and not yet merged.
  struct RoundInFlight {
    int64_t land_step = 0;     // merged at this step (launch + tau at launch)
    int64_t advance_step = 0;  // int8: its data all-reduce starts here
  };

  // How many of the oldest rounds in flight are at or past their advance
  // step (Advance skips those already advanced).
  int RoundsToAdvance(int64_t step) const {
    int n = 0;
    for (const RoundInFlight& round : rounds_) {
      if (step < round.advance_step) break;
      ++n;
    }
    return n;
  }

  // How many of the oldest rounds in flight land at `step`: in launch
  // order, so a round whose tau shrank waits for the one before it.
  int DueRounds(int64_t step) const {
    int due = 0;
    for (const RoundInFlight& round : rounds_) {
      if (step < round.land_step) break;
      ++due;
    }
    return due;
  }

  // Merges the `count` oldest rounds in flight; with overlap_steps auto,
  // each landed round's measurements (every rank's, all-gathered with it)
  // then decide tau, on every rank alike.
  absl::Status LandRounds(int count, const StepBoundary& at, SyncTraffic* traffic) {
    if (auto s = CountRound(averaging_->Finish(count), at, traffic); !s.ok()) return s;
    for (int i = 0; i < count && !rounds_.empty(); ++i) rounds_.pop_front();
    // The newest round's measurements (several land together when tau shrank).
    const auto& payloads = averaging_->last_round().side_payloads;
    for (auto it = payloads.rbegin(); it != payloads.rend(); ++it) {
      if (it->empty()) continue;
      Decide(*it, at);
      break;
    }
    return absl::OkStatus();
  }

  // overlap_steps auto: what this rank last measured, sent with a round:
  // its newest round's in-flight time and blocked wait, a step's time, and
  // whether it has finished a round at all (2: a full window of them).
  // And the shape of the rounds measured.
  static constexpr size_t kMeasurementFloats = 5;
  std::vector<float> Measurement() {
    return {static_cast<float>(recent_in_flight_.Median()), static_cast<float>(step_clock_.MedianSeconds()),
            static_cast<float>(last_round_.blocked_seconds),
            last_round_known_ ? (recent_in_flight_.full() ? 2.0f : 1.0f) : 0.0f,
            static_cast<float>(shape_.shape)};
  }

  // The shape of the rounds launched from now on; a new shape is measured
  // afresh. Every rank calls it at the same boundary. False where these
  // rounds cannot take it (no int8): they stay all-reduce for good.
  bool AdoptShape(const RoundShapeState& next) {
    if (!averaging_->SetRoundShape(next.shape)) {
      shape_.settled = true;
      return false;
    }
    const bool changed = next.shape != shape_.shape;
    shape_ = next;
    if (changed) {
      recent_in_flight_ = RecentMedian{};
      last_round_known_ = false;
    }
    return true;
  }

  // The ranks' measurements as one: the slowest round and the longest wait
  // (tau must hide the round for every rank), the mean step. The same
  // arithmetic on the same gathered values: the same tau on every rank.
  void Decide(const std::vector<float>& gathered, const StepBoundary& at) {
    const size_t ranks = gathered.size() / kMeasurementFloats;
    OverlapMeasurement m;
    bool full_window = true;
    for (size_t r = 0; r < ranks; ++r) {
      const float* v = gathered.data() + r * kMeasurementFloats;
      // Every rank must have finished a round of the current shape before
      // the times mean anything.
      if (v[3] < 1.0f || v[4] != static_cast<float>(shape_.shape)) return;
      full_window = full_window && v[3] >= 2.0f;
      m.round_seconds = std::max<double>(m.round_seconds, v[0]);
      m.step_seconds += v[1] / static_cast<double>(ranks);
      m.blocked_seconds = std::max<double>(m.blocked_seconds, v[2]);
    }
    measured_ = m;
    const OverlapDecision decision = ChooseOverlap(tau_, measured_, OverlapBoundsOf(config_));
    if (decision.steps != tau_) {
      LOG(INFO) << absl::StrFormat(
          "overlap_steps auto: %d -> %d at step %d (rounds take %.3f s in flight, a step %.4f s, the last round "
          "blocked %.4f s)",
          tau_, decision.steps, at.step, measured_.round_seconds, measured_.step_seconds, measured_.blocked_seconds);
    }
    const std::string warning = OverlapWarning(decision, measured_, OverlapBoundsOf(config_));
    if (warning != warning_ && !warning.empty()) LOG(WARNING) << warning;
    warning_ = warning;
    tau_ = decision.steps;
    const RoundShapeState before = shape_;
    const RoundShapeState next = NextRoundShape(before, measured_.round_seconds, decision.beyond_bound, full_window);
    if (next.shape != before.shape && AdoptShape(next)) {
      LOG(INFO) << absl::StrFormat(
          "int8 rounds: %s -> %s at step %d (%s rounds take %.3f s in flight%s)", RoundShapeName(before.shape),
          RoundShapeName(next.shape), at.step, RoundShapeName(before.shape), measured_.round_seconds,
          next.settled ? absl::StrFormat(", all-reduce rounds took %.3f s: all-reduce from here on",
                                         before.all_reduce_round_seconds)
                       : ", more than tau = sync.every steps can hide");
    }
  }

  // Forgets the rounds in flight: a new start (the parameters were
  // restored; the averaging forgets its own rounds when its communicator goes).
  void DropRounds() { rounds_.clear(); }

  // Where fragment f's rounds fall within each `every` local steps: spread
  // evenly, the last fragment at the end (with one fragment: every
  // `every` steps, as plain averaging).
  int64_t FragmentPhase(int f) const {
    return ((f + 1) * config_.every / averaging_->fragments()) % config_.every;
  }

  // Wherever replicas must agree: before an evaluation, at a checkpoint step
  // and at the last step, so evaluations, checkpoints and the final bitwise
  // check see the averaged model. Streaming also syncs fully once commits
  // are due, since its regular rounds never leave replicas identical.
  bool FullSyncDue(const StepBoundary& at) const {
    if (at.epoch_end || at.eval_due || at.checkpoint_due || at.done) return true;
    return config_.streaming() && at.steps_since_commit >= at.log_interval * config_.every;
  }

  absl::Status Named(const absl::Status& s, const StepBoundary& at) const {
    return WithContext(s, absl::StrCat("parameter averaging at step ", at.step, ": "));
  }

  // With throughput shares, ranks train different numbers of samples
  // between a fragment's rounds: its mean weights each rank by its share of
  // them. Equal shares keep the plain mean (weight 1, bitwise as before).
  double TakeWeight(int f) {
    FragmentSamples& samples = samples_.at(static_cast<size_t>(f));
    double weight = 1;
    if (config_.throughput_shares && samples.step > 0) {
      weight = static_cast<double>(data_->size()) * static_cast<double>(samples.rank) / static_cast<double>(samples.step);
    }
    samples = FragmentSamples{};
    return weight;
  }
  void ResetSamples() { samples_.assign(static_cast<size_t>(averaging_->fragments()), FragmentSamples{}); }

  // Counts a finished round into `traffic`.
  absl::Status CountRound(const absl::Status& status, const StepBoundary& at, SyncTraffic* traffic) {
    if (!status.ok()) return Named(status, at);
    const AveragingRoundStats& round = averaging_->last_round();
    for (const RoundTimeline& timeline : round.timelines) {
      traffic->round_phases.Add(timeline);
      // Only rounds of the current shape measure it (round_shape.h).
      if (timeline.shape != shape_.shape) continue;
      last_round_ = timeline;
      last_round_known_ = true;
      recent_in_flight_.Add(timeline.in_flight_seconds);
    }
    SyncStrategy::Count(traffic, round.wire_bytes, round.seconds);
    ++traffic->averaging_rounds;
    traffic->last_round_seconds = round.seconds;
    traffic->last_round_interval_seconds = round.interval_seconds;
    VLOG(1) << absl::StrFormat("averaging round %d at step %d: %d bytes, %.4f s, %.3f s since the previous round",
                               traffic->averaging_rounds, at.step, round.wire_bytes, round.seconds,
                               round.interval_seconds);
    return absl::OkStatus();
  }

  const SyncConfig config_;
  std::unique_ptr<AveragingRounds> averaging_;
  std::unique_ptr<GradientSync> island_gradients_;  // sync.islands_by only
  std::vector<int> island_ranks_;
  int64_t local_steps_since_full_sync_ = 0;
  bool in_sync_ = true;
  std::deque<RoundInFlight> rounds_;  // oldest first
  int64_t tau_ = InitialOverlapSteps(config_);
  StepClock step_clock_;
  RoundTimeline last_round_;  // the newest round this rank finished
  RecentMedian recent_in_flight_;  // its newest rounds' in-flight times
  bool last_round_known_ = false;
  OverlapMeasurement measured_;  // the ranks' mean, as the last decision saw it
  RoundShapeState shape_;        // the int8 rounds' shape (round_shape.h)
  std::string warning_;
  // Samples trained since each fragment's last round: this rank's, all ranks'.
  struct FragmentSamples {
    int64_t rank = 0;
    int64_t step = 0;
  };
  std::vector<FragmentSamples> samples_;
};

// Mode average across islands: rounds over each rank's shard and cross
// group (island_sync.h), local steps summed over the island.
absl::StatusOr<std::unique_ptr<SyncStrategy>> CreateIslandStrategy(const SyncConfig& config,
                                                                   std::vector<torch::Tensor> params,
                                                                   Communicator* data, const IslandComms& islands,
                                                                   const ParameterAveragingOptions& options) {
  // Each cross group weighs only its own ranks' samples: the weights would
  // differ between an island's shards and their schedules part (job_spec.cc
  // refuses it with islands_by). overlap_steps auto decides on every
  // owner's measurements, which the island rounds spread (island_sync.h).
  if (config.throughput_shares) {
    return absl::InvalidArgumentError("sync.islands_by: shares throughput is not supported");
  }
  auto rounds = IslandRounds::Create(params, *islands.layout, islands.island, islands.cross, options);
  if (!rounds.ok()) return rounds.status();
  auto strategy = std::make_unique<AveragingStrategy>(params, data, config, std::move(*rounds));
  strategy->SumLocalStepsOver(islands.island, islands.layout->my_island(), config);
  return std::unique_ptr<SyncStrategy>(std::move(strategy));
}

}  // namespace

SyncStrategy::SyncStrategy(std::vector<torch::Tensor> params, Communicator* data, const SyncConfig& config)
    : params_(params),
      data_(data),
      gradients_(std::make_unique<GradientSync>(std::move(params), data, GradientOptions(config))),
      own_rank_{data->rank()} {
  for (int r = 0; r < data->size(); ++r) all_ranks_.push_back(r);
}

SyncStrategy::~SyncStrategy() = default;

void SyncStrategy::ArmBackward(bool local) {
  if (GradientSync* gradients = StepGradients(local); gradients != nullptr) gradients->ArmForBackward();
}

absl::Status SyncStrategy::Update(bool local, const UpdateInputs& in) {
  if (auto s = FinishGradients(local, in.step); !s.ok()) return s;
  if (auto skip = AgreeToSkip(in); !skip.ok() || *skip) return skip.status();
  // The rule the sharded path applies too, without a host read.
  if (in.grad_clip_norm > 0) last_step_.grad_norm = ClipGradNormOnDevice(params_, in.grad_clip_norm);
  if (fused_.Step(*in.optimizer, in.device_lr)) return absl::OkStatus();
  if (in.device_lr.defined()) {
    return absl::FailedPreconditionError(
        "a device learning rate needs the fused CUDA optimizer step, and it cannot step these parameters");
  }
  in.optimizer->step();
  return absl::OkStatus();
}

absl::StatusOr<bool> SyncStrategy::AgreeToSkip(const UpdateInputs& in) {
  if (!in.skip_nonfinite) return false;
  torch::NoGradGuard no_grad;
  const torch::Device device = params_.empty() ? torch::Device(torch::kCPU) : params_.front().device();
  // The squares of float32 values cannot overflow a float64 sum: it is
  // finite exactly when every gradient element is.
  torch::Tensor squares = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  for (const torch::Tensor& p : params_) {
    if (p.grad().defined() && p.grad().numel() > 0) squares = squares + p.grad().to(torch::kFloat64).pow(2).sum();
  }
  torch::Tensor bad = torch::logical_not(torch::isfinite(squares));
  if (in.step_loss.defined()) bad = bad.logical_or(torch::logical_not(torch::isfinite(in.step_loss.to(device))));
  // Summed over ranks (on the data communicator's device): every rank
  // decides on the same count.
  torch::Tensor flag = bad.to(torch::kFloat32).reshape({1}).contiguous();
  if (data_->size() > 1) {
    if (auto s = data_->AllReduce(flag.data_ptr(), 1, DataType::kFloat32); !s.ok()) {
      return AtStep(s, "non-finite agreement all-reduce", in.step);
    }
  }
  last_step_.skipped = in.host_reads->Read(flag) > 0;
  return last_step_.skipped;
}

absl::Status SyncStrategy::FinishGradients(bool local, int64_t step) {
  last_step_ = SyncStepCost{};
  GradientSync* gradients = StepGradients(local);
  if (gradients == nullptr) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = gradients->Finish();
  last_step_.finish_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  last_step_.launched_during_backward = gradients->last_stats().launched_during_backward;
  return s.ok() ? s : AtStep(s, "gradient all-reduce", step);
}

void SyncStrategy::Count(SyncTraffic* traffic, int64_t wire_bytes, double wait_seconds) {
  traffic->wire_bytes += wire_bytes;
  traffic->allreduce_wait_seconds += wait_seconds;
  last_step_.wire_bytes += wire_bytes;
  last_step_.wait_seconds += wait_seconds;
}

void SyncStrategy::CountAllReduceStep(SyncTraffic* traffic) {
  ++traffic->allreduce_steps;
  const GradientSyncStats& stats = gradients_->last_stats();
  Count(traffic, stats.wire_bytes, stats.exposed_wait_seconds);
}

absl::Status SyncStrategy::AtStep(const absl::Status& s, const char* what, int64_t step) {
  return WithContext(s, absl::StrCat(what, " at step ", step, ": "));
}

absl::Status SyncStrategy::Capture(Model* model, torch::optim::Optimizer* optimizer, const TrainingPosition& position,
                                   int64_t generation, CommittedState* committed) {
  if (auto s = GatherOptimizerState(*optimizer); !s.ok()) return s;
  // Marked invalid first: a failed capture must not leave a mix of two commits.
  committed->generation = -1;
  if (auto s = committed->snapshot.Capture(model, optimizer, position, OuterState(), RankState()); !s.ok()) return s;
  committed->generation = generation;
  committed->step = position.step;
  return absl::OkStatus();
}

absl::Status SyncStrategy::Resume(const std::vector<torch::Tensor>& outer,
                                  const std::vector<torch::Tensor>& rank_state) {
  if (auto s = RestoreOuterState(outer); !s.ok()) return s;
  return RestoreRankState(rank_state);
}

std::string SyncStrategy::BucketSummary() const {
  std::string summary = absl::StrCat(gradients_->bucket_elements().size(), " gradient buckets");
  if (gradients_->in_place_buckets() > 0) {
    absl::StrAppend(&summary, " (", gradients_->in_place_buckets(), " summed in place)");
  }
  return summary;
}

absl::StatusOr<std::unique_ptr<SyncStrategy>> CreateSyncStrategy(const SyncConfig& config,
                                                                 std::vector<torch::Tensor> params,
                                                                 Communicator* data, const IslandComms* islands) {
  switch (config.mode) {
    case SyncMode::kAllReduce:
      if (config.shard_optimizer) return ShardedAllReduceStrategy::Create(std::move(params), data, config);
      return std::unique_ptr<SyncStrategy>(new AllReduceStrategy(std::move(params), data, config));
    case SyncMode::kAverage: {
      ParameterAveragingOptions options;
      options.first_bucket_mib = config.first_bucket_mib;
      options.bucket_cap_mib = config.bucket_cap_mib;
      options.wire_type = config.wire_type;
      options.int8_wire = config.int8_wire;
      options.fragments = config.fragments;
      options.outer = config.outer;
      if (islands != nullptr) return CreateIslandStrategy(config, std::move(params), data, *islands, options);
      auto averaging = ParameterAveraging::Create(params, data, options);
      if (!averaging.ok()) return averaging.status();
      return std::unique_ptr<SyncStrategy>(
          new AveragingStrategy(std::move(params), data, config, std::move(*averaging)));
    }
  }
  return absl::InvalidArgumentError("sync.mode: unknown");
}

}  // namespace herd
