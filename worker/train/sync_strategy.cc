#include "worker/train/sync_strategy.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/train/parameter_averaging.h"

namespace herd {
namespace {

std::string RateSummary(const SyncTraffic& t) {
  return absl::StrFormat("%d samples in %.1f s of training (%.1f samples/s)", t.samples, t.train_seconds,
                         t.SamplesPerSecond());
}

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
  // A checkpoint written in mode average resumes here without its outer momentum.
  absl::Status RestoreOuterState(const std::vector<torch::Tensor>&) override { return absl::OkStatus(); }

  std::string Describe() const override {
    return gradients_->reduce_scatter()
               ? "sync allreduce: every step's gradients are summed, reduce-scattered (each rank its shard)"
               : "sync allreduce: every step's gradients are summed";
  }

  std::string TrafficSummary(const SyncTraffic& t) const override {
    return absl::StrFormat("all-reduce: %d steps, %d bytes sent (%.1f bytes/sample); %s; waited %.1f s (%.1f%%) "
                           "for the all-reduce after backward",
                           t.allreduce_steps, t.wire_bytes, t.BytesPerSample(), RateSummary(t),
                           t.allreduce_wait_seconds,
                           t.train_seconds > 0 ? 100 * t.allreduce_wait_seconds / t.train_seconds : 0.0);
  }
};

class AveragingStrategy : public SyncStrategy {
 public:
  AveragingStrategy(std::vector<torch::Tensor> params, Communicator* data, const SyncConfig& config,
                    std::unique_ptr<ParameterAveraging> averaging)
      : SyncStrategy(std::move(params), data, config), config_(config), averaging_(std::move(averaging)) {}

  bool LocalStep(int64_t steps_done) const override { return steps_done >= config_.warmup_steps; }

  absl::Status AfterStep(bool local, const StepBoundary& at, SyncTraffic* traffic) override {
    if (!local) {
      CountAllReduceStep(traffic);
      // Replicas are identical after an all-reduce step: averaging (after
      // warmup) starts from here.
      averaging_->ResetAnchor();
      in_sync_ = true;
      return absl::OkStatus();
    }
    ++traffic->local_steps;
    ++local_steps_since_full_sync_;
    in_sync_ = false;
    // Overlap: the round launched after the previous step lands now.
    if (averaging_->in_flight()) {
      if (auto s = Count(averaging_->Finish(), at, traffic); !s.ok()) return s;
    }
    if (FullSyncDue(at)) {
      if (auto s = Count(averaging_->Round(), at, traffic); !s.ok()) return s;
      local_steps_since_full_sync_ = 0;
      in_sync_ = true;
      return absl::OkStatus();
    }
    const int64_t phase = local_steps_since_full_sync_ % config_.every;
    for (int f = 0; f < averaging_->fragments(); ++f) {
      if (phase != FragmentPhase(f)) continue;
      if (auto s = averaging_->Launch(f, /*keep_local_steps=*/config_.overlap); !s.ok()) return Named(s, at);
      if (!config_.overlap) {
        if (auto s = Count(averaging_->Finish(), at, traffic); !s.ok()) return s;
      }
    }
    // One fragment synced without overlap is a full sync.
    in_sync_ = !config_.streaming() && phase == 0;
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
    local_steps_since_full_sync_ = 0;
    in_sync_ = true;
  }
  std::vector<torch::Tensor> OuterState() const override { return averaging_->OuterState(); }
  absl::Status RestoreOuterState(const std::vector<torch::Tensor>& state) override {
    return state.empty() ? absl::OkStatus() : averaging_->RestoreOuterState(state);
  }
  std::vector<torch::Tensor> RankState() const override { return averaging_->Residuals(); }
  absl::Status RestoreRankState(const std::vector<torch::Tensor>& state) override {
    return averaging_->RestoreResiduals(state);
  }

  std::string Describe() const override {
    std::string fragments =
        config_.fragments > 1 ? absl::StrCat(" in ", config_.fragments, " staggered fragments") : "";
    return absl::StrCat("sync average: a round every ", config_.every, " local steps", fragments, " after ",
                        config_.warmup_steps, " all-reduce steps, outer ", OuterKindName(config_.outer.kind),
                        config_.overlap ? ", merged one step later (overlap)" : "",
                        config_.int8_wire ? ", int8 wire with error feedback" : "");
  }

  std::string TrafficSummary(const SyncTraffic& t) const override {
    return absl::StrFormat("averaging: %d rounds, %d bytes sent (%.1f bytes/sample); %d local steps, %d all-reduce "
                           "steps, %s",
                           t.averaging_rounds, t.wire_bytes, t.BytesPerSample(), t.local_steps, t.allreduce_steps,
                           RateSummary(t));
  }

 private:
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
    return absl::Status(s.code(), absl::StrCat("parameter averaging at step ", at.step, ": ", s.message()));
  }

  // Counts a finished round into `traffic`.
  absl::Status Count(const absl::Status& status, const StepBoundary& at, SyncTraffic* traffic) {
    if (!status.ok()) return Named(status, at);
    const AveragingRoundStats& round = averaging_->last_round();
    traffic->wire_bytes += round.wire_bytes;
    ++traffic->averaging_rounds;
    traffic->last_round_seconds = round.seconds;
    traffic->last_round_interval_seconds = round.interval_seconds;
    VLOG(1) << absl::StrFormat("averaging round %d at step %d: %d bytes, %.4f s, %.3f s since the previous round",
                               traffic->averaging_rounds, at.step, round.wire_bytes, round.seconds,
                               round.interval_seconds);
    return absl::OkStatus();
  }

  const SyncConfig config_;
  std::unique_ptr<ParameterAveraging> averaging_;
  int64_t local_steps_since_full_sync_ = 0;
  bool in_sync_ = true;
};

}  // namespace

SyncStrategy::SyncStrategy(std::vector<torch::Tensor> params, Communicator* data, const SyncConfig& config)
    : gradients_(std::make_unique<GradientSync>(std::move(params), data, GradientOptions(config))) {}

SyncStrategy::~SyncStrategy() = default;

void SyncStrategy::CountAllReduceStep(SyncTraffic* traffic) const {
  ++traffic->allreduce_steps;
  traffic->wire_bytes += gradients_->last_stats().wire_bytes;
  traffic->allreduce_wait_seconds += gradients_->last_stats().exposed_wait_seconds;
}

absl::StatusOr<std::unique_ptr<SyncStrategy>> CreateSyncStrategy(const SyncConfig& config,
                                                                 std::vector<torch::Tensor> params,
                                                                 Communicator* data) {
  switch (config.mode) {
    case SyncMode::kAllReduce:
      return std::unique_ptr<SyncStrategy>(new AllReduceStrategy(std::move(params), data, config));
    case SyncMode::kAverage: {
      ParameterAveragingOptions options;
      options.first_bucket_mib = config.first_bucket_mib;
      options.bucket_cap_mib = config.bucket_cap_mib;
      options.wire_type = config.wire_type;
      options.int8_wire = config.int8_wire;
      options.fragments = config.fragments;
      options.outer = config.outer;
      auto averaging = ParameterAveraging::Create(params, data, options);
      if (!averaging.ok()) return averaging.status();
      return std::unique_ptr<SyncStrategy>(
          new AveragingStrategy(std::move(params), data, config, std::move(*averaging)));
    }
  }
  return absl::InvalidArgumentError("sync.mode: unknown");
}

}  // namespace herd
