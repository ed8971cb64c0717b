#include "worker/train/report/trainer_metrics.h"

#include "absl/strings/str_cat.h"

namespace herd {
namespace {

using Labels = std::map<std::string, std::string>;

// Steps take from about a millisecond (a small MLP) to seconds (a ResNet on
// a CPU).
prometheus::Histogram::BucketBoundaries StepBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

prometheus::Counter& Counter(prometheus::Registry& registry, const char* name, const char* help, const Labels& labels) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
}

prometheus::Gauge& Gauge(prometheus::Registry& registry, const char* name, const char* help, const Labels& labels) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(labels);
}

}  // namespace

TrainerMetrics::TrainerMetrics(prometheus::Registry& registry, const TrainerMetricsLabels& labels)
    : labels_{{"job", labels.job}, {"rank", absl::StrCat(labels.rank)}, {"worker", labels.worker}},
      samples_(Counter(registry, "herd_train_samples_total",
                       "Training samples this rank processed; summed over ranks, the job's samples.", labels_)),
      steps_(Counter(registry, "herd_train_steps_total", "Optimizer steps this rank completed.", labels_)),
      step_duration_(prometheus::BuildHistogram()
                         .Name("herd_train_step_duration_seconds")
                         .Help("Wall time of one optimizer step: forward, backward, all-reduce wait and optimizer.")
                         .Register(registry)
                         .Add(labels_, StepBuckets())),
      forward_(Counter(registry, "herd_train_forward_seconds_total", "Time spent in forward passes.", labels_)),
      backward_(Counter(registry, "herd_train_backward_seconds_total",
                        "Time spent in backward passes (including launching gradient buckets).", labels_)),
      optimizer_(Counter(registry, "herd_train_optimizer_seconds_total",
                         "Time spent in gradient clipping, learning rate updates and optimizer steps.", labels_)),
      allreduce_wait_(Counter(
          registry, "herd_train_allreduce_wait_seconds_total",
          "Time blocked on all-reduce outside backward: the exposed wait for gradient buckets, or parameter-averaging "
          "rounds (sync mode average).",
          labels_)),
      allreduce_bytes_(Counter(
          registry, "herd_train_allreduce_bytes_total",
          "Bytes this rank all-reduced (gradient buckets or averaged parameters, in the wire format; with "
          "sync.shard_optimizer the gradient reduce-scatter and the parameter all-gather, each counted as half its "
          "buffer).",
          labels_)),
      compute_(Counter(registry, "herd_train_compute_seconds_total",
                       "Step wall time not spent waiting for the others: each step's wall time minus its "
                       "herd_train_allreduce_wait_seconds_total share (straggler detection).",
                       labels_)),
      buckets_during_backward_(Counter(registry, "herd_train_buckets_launched_during_backward_total",
                                       "Gradient buckets whose all-reduce started before backward finished.", labels_)),
      loss_(Gauge(registry, "herd_train_loss", "Mean training loss of this rank since its last progress report.",
                  labels_)),
      epoch_(Gauge(registry, "herd_train_epoch", "Current epoch (completed passes over the training set).", labels_)),
      step_(Gauge(registry, "herd_train_step", "Optimizer steps the job has completed (all generations).", labels_)),
      world_size_(Gauge(registry, "herd_train_world_size", "Ranks in the job's current generation.", labels_)),
      generation_(Gauge(registry, "herd_train_generation", "The job's current generation number.", labels_)),
      generation_failures_(Counter(registry, "herd_train_generation_failures_total",
                                   "Generations that failed under this trainer (a collective failed or timed out, or "
                                   "the coordinator fenced it) and that it recovered from in memory.",
                                   labels_)),
      long_waits_(Counter(registry, "herd_train_long_waits_total",
                          "Waits on the other ranks (a collective, or forming the generation's communicators) that "
                          "lasted half the collective timeout: a collective came close to timing out (a straggler, a "
                          "slow link, a hung peer).",
                          labels_)),
      checkpoint_failures_(Counter(registry, "herd_train_checkpoint_failures_total",
                                   "Checkpoint writes that failed (storage full, read-only, missing or failing); the "
                                   "job goes on unless its checkpoint.on_failure is fail.",
                                   labels_)),
      nonfinite_skips_(Counter(registry, "herd_train_nonfinite_steps_skipped_total",
                               "Steps dropped because their loss or gradient norm was NaN or infinite "
                               "(on_nonfinite: skip_step); the same on every rank.",
                               labels_)),
      context_loads_(Counter(registry, "herd_train_context_loads_total",
                             "Times this trainer loaded its dataset and built its model: once per trainer process, "
                             "never again when a generation re-forms.",
                             labels_)),
      context_load_seconds_(Gauge(registry, "herd_train_context_load_seconds",
                                  "How long loading the dataset and building the model took.", labels_)),
      reform_seconds_(Gauge(registry, "herd_train_reform_seconds",
                            "How long the last generation this trainer joined took to be ready to train: "
                            "communicators and healing from the newest commit, no reload.",
                            labels_)),
      last_checkpoint_(
          Gauge(registry, "herd_train_last_checkpoint_timestamp_seconds",
                "Unix time of the newest checkpoint this trainer committed (rank 0 writes them); 0 until there is one.",
                labels_)),
      eval_(prometheus::BuildGauge()
                .Name("herd_train_eval")
                .Help("The latest held-out evaluation, by metric (accuracy, loss).")
                .Register(registry)),
      averaging_rounds_(Counter(registry, "herd_train_averaging_rounds_total",
                                "Parameter-averaging rounds this rank took part in (sync mode average).", labels_)),
      bytes_per_sample_(Gauge(registry, "herd_train_sync_bytes_per_sample",
                              "Bytes this rank all-reduced per sample it trained on, since the trainer started "
                              "(gradient buckets or averaged parameters, in the wire format).",
                              labels_)),
      round_interval_(Gauge(registry, "herd_train_averaging_round_interval_seconds",
                            "Wall time between the last two parameter-averaging rounds.", labels_)),
      optimizer_state_bytes_(Gauge(registry, "herd_train_optimizer_state_bytes",
                                   "Bytes of optimizer state this rank holds between steps (its shard with "
                                   "sync.shard_optimizer; commits briefly gather the whole state).",
                                   labels_)),
      device_memory_peak_bytes_(prometheus::BuildGauge()
                                    .Name("herd_train_device_memory_peak_bytes")
                                    .Help("Peak bytes the GPU's caching allocator held for this trainer since it "
                                          "started (device cuda only; compare torch.cuda.max_memory_reserved()).")
                                    .Register(registry)),
      straggler_rank_(prometheus::BuildGauge()
                          .Name("herd_train_straggler_rank")
                          .Help("Rank 0: the rank with the most compute per step over the last log interval (the "
                                "slowest; the others wait for it). Absent with one rank.")
                          .Register(registry)),
      straggler_holdback_(prometheus::BuildGauge()
                              .Name("herd_train_straggler_holdback_ratio")
                              .Help("Rank 0: the other ranks' mean wait per step for the slowest rank over the last "
                                    "log interval, as a fraction of the mean step time (0..1). Absent with one rank.")
                              .Register(registry)),
      batch_share_(Gauge(registry, "herd_train_batch_share_samples",
                         "This rank's samples per step: its share of the global batch (sync.shares equal, or "
                         "throughput: re-planned from the ranks' measured rates).",
                         labels_)),
      round_phase_family_(prometheus::BuildCounter()
                              .Name("herd_train_averaging_round_phase_seconds_total")
                              .Help("Parameter-averaging rounds' time by phase, summed over rounds: launch, scales "
                                    "(int8 scale all-gather), queued (behind earlier collectives), reduce_scatter, "
                                    "all_gather, merge; in_flight (launch to the network's end) and blocked (the "
                                    "training loop waited). Divide by herd_train_averaging_rounds_total for means.")
                              .Register(registry)),
      overlap_steps_(Gauge(registry, "herd_train_averaging_overlap_steps",
                           "Local steps between an averaging round's launch and its merge (tau): "
                           "sync.overlap_steps, or what overlap_steps auto chose; 0 when rounds merge at once.",
                           labels_)),
      gather_rounds_(Gauge(registry, "herd_train_averaging_gather_rounds",
                           "Mode average with int8 rounds: 1 while they gather (one hop, each rank's own codes), "
                           "0 while they all-reduce (scales, reduce-scatter, all-gather) or without int8 rounds.",
                           labels_)),
      window_bytes_(prometheus::BuildGauge()
                        .Name("herd_train_data_plane_window_bytes")
                        .Help("TCP data plane: the smallest congestion window (bytes) over this rank's peers as the "
                              "last averaging round's data all-reduce started; a burst starting near the initial "
                              "window (10 segments) starts in slow start.")
                        .Register(registry)),
      rtt_seconds_(prometheus::BuildGauge()
                       .Name("herd_train_data_plane_rtt_seconds")
                       .Help("TCP data plane: the largest smoothed round-trip time over this rank's peers as the "
                             "last averaging round's data all-reduce started.")
                       .Register(registry)),
      cuda_graph_fallbacks_(prometheus::BuildCounter()
                                .Name("herd_train_cuda_graph_fallbacks_total")
                                .Help("cuda_graphs: generations (and failed captures) that ran their steps eagerly, "
                                      "by reason (cpu_device, not_built, torchscript_model, optimizer_not_fused, "
                                      "non_nccl_backend, local_steps, skip_step, step_host_sync, capture_failed).")
                                .Register(registry)),
      host_step_seconds_(prometheus::BuildGauge()
                             .Name("herd_train_host_step_seconds")
                             .Help("Host wall time of the step loop per step over the last log interval (launches "
                                   "and host work; compare herd_train_device_step_seconds).")
                             .Register(registry)),
      device_step_seconds_(prometheus::BuildGauge()
                               .Name("herd_train_device_step_seconds")
                               .Help("Device cuda: the GPU stream's time per step over the last log interval (CUDA "
                                     "events). About the host's: launch-bound; well above it: compute-bound. "
                                     "Absent on cpu.")
                               .Register(registry)) {
  const std::pair<const char*, double RoundTimeline::*> phases[] = {
      {"launch", &RoundTimeline::launch_seconds},
      {"scales", &RoundTimeline::scales_seconds},
      {"queued", &RoundTimeline::queued_seconds},
      {"reduce_scatter", &RoundTimeline::reduce_scatter_seconds},
      {"all_gather", &RoundTimeline::all_gather_seconds},
      {"merge", &RoundTimeline::merge_seconds},
      {"in_flight", &RoundTimeline::in_flight_seconds},
      {"blocked", &RoundTimeline::blocked_seconds},
  };
  for (const auto& [name, field] : phases) {
    Labels labels = labels_;
    labels["phase"] = name;
    round_phases_.push_back({field, &round_phase_family_.Add(labels), 0});
  }
}

void TrainerMetrics::SetOverlapSteps(int64_t steps) { overlap_steps_.Set(static_cast<double>(steps)); }

void TrainerMetrics::SetGatherRounds(bool gather) { gather_rounds_.Set(gather ? 1 : 0); }

void TrainerMetrics::SetStraggler(int64_t rank, double holdback_fraction) {
  // Once per log interval: Add() finds the existing series.
  straggler_rank_.Add(labels_).Set(static_cast<double>(rank));
  straggler_holdback_.Add(labels_).Set(holdback_fraction);
}

void TrainerMetrics::ObserveCudaGraphFallback(const char* reason) {
  auto labels = labels_;
  labels["reason"] = reason;
  cuda_graph_fallbacks_.Add(labels).Increment();
}

void TrainerMetrics::SetStepTimes(double host_seconds, double device_seconds) {
  host_step_seconds_.Add(labels_).Set(host_seconds);
  if (device_seconds >= 0) device_step_seconds_.Add(labels_).Set(device_seconds);
}

void TrainerMetrics::SetBatchShare(int64_t samples) { batch_share_.Set(static_cast<double>(samples)); }

void TrainerMetrics::SetDeviceMemoryPeak(int64_t bytes) {
  // Once a second, off the step loop: Add() finds the existing series.
  if (bytes >= 0) device_memory_peak_bytes_.Add(labels_).Set(static_cast<double>(bytes));
}

void TrainerMetrics::ObserveSyncTraffic(const SyncTraffic& traffic) {
  if (traffic.averaging_rounds > rounds_seen_) {
    averaging_rounds_.Increment(static_cast<double>(traffic.averaging_rounds - rounds_seen_));
    rounds_seen_ = traffic.averaging_rounds;
    round_interval_.Set(traffic.last_round_interval_seconds);
    const RoundTimeline& sum = traffic.round_phases.sum;
    for (PhaseCounter& phase : round_phases_) {
      const double total = sum.*phase.field;
      if (total > phase.seen) phase.counter->Increment(total - phase.seen);
      phase.seen = total;
    }
    if (sum.window_bytes > 0) {
      window_bytes_.Add(labels_).Set(static_cast<double>(sum.window_bytes));
      rtt_seconds_.Add(labels_).Set(sum.rtt_seconds);
    }
  }
  bytes_per_sample_.Set(traffic.BytesPerSample());
}

void TrainerMetrics::ObserveStep(const StepStats& stats) {
  samples_.Increment(static_cast<double>(stats.local_samples));
  steps_.Increment();
  step_duration_.Observe(stats.step_seconds);
  forward_.Increment(stats.forward_seconds);
  backward_.Increment(stats.backward_seconds);
  optimizer_.Increment(stats.optimizer_seconds);
  allreduce_wait_.Increment(stats.allreduce_wait_seconds);
  compute_.Increment(stats.compute_seconds);
  allreduce_bytes_.Increment(static_cast<double>(stats.allreduce_bytes));
  buckets_during_backward_.Increment(stats.buckets_launched_during_backward);
  step_.Set(static_cast<double>(stats.step));
  epoch_.Set(static_cast<double>(stats.epoch));
  optimizer_state_bytes_.Set(static_cast<double>(stats.optimizer_state_bytes));
}

void TrainerMetrics::ObserveGenerationFailure() { generation_failures_.Increment(); }
void TrainerMetrics::ObserveLongWait() { long_waits_.Increment(); }

void TrainerMetrics::ObserveCheckpointFailure() { checkpoint_failures_.Increment(); }

void TrainerMetrics::ObserveNonFiniteSkip() { nonfinite_skips_.Increment(); }

void TrainerMetrics::ObserveContextLoad(double seconds) {
  context_loads_.Increment();
  context_load_seconds_.Set(seconds);
}

void TrainerMetrics::ObserveReform(double seconds) { reform_seconds_.Set(seconds); }

void TrainerMetrics::SetMembership(int64_t world_size, int64_t generation) {
  world_size_.Set(static_cast<double>(world_size));
  generation_.Set(static_cast<double>(generation));
}

void TrainerMetrics::SetLoss(double loss) { loss_.Set(loss); }

void TrainerMetrics::SetEval(const std::map<std::string, double>& metrics) {
  // Once per evaluation, not per step: Add() finds the existing series.
  for (const auto& [name, value] : metrics) {
    Labels labels = labels_;
    labels["metric"] = name;
    eval_.Add(labels).Set(value);
  }
}

void TrainerMetrics::SetLastCheckpoint(double unix_seconds) { last_checkpoint_.Set(unix_seconds); }

}  // namespace herd
