// The trainer's Prometheus metrics. Families and series are built once at
// start-up and their references cached, so a training step only updates
// atomics (and one histogram); the registry is never searched on the hot path.
// Every series carries the labels job, rank and worker.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/train/sync/sync_traffic.h"

namespace herd {

struct TrainerMetricsLabels {
  std::string job;
  int64_t rank = 0;
  std::string worker;
};

// What one optimizer step did on this rank.
struct StepStats {
  int64_t local_samples = 0;  // this rank's share: summed over ranks, the global batch
  double step_seconds = 0;    // the whole step, from its first micro-batch to the optimizer
  double forward_seconds = 0;
  double backward_seconds = 0;
  double optimizer_seconds = 0;       // clipping, learning rate and optimizer step
  double allreduce_wait_seconds = 0;  // exposed wait in GradientSync::Finish
  // Straggler detection: the step's wall time (averaging rounds after it
  // included) minus allreduce_wait_seconds, what this rank spent not waiting
  // for the others.
  double compute_seconds = 0;
  int64_t allreduce_bytes = 0;        // bytes this rank all-reduced
  int buckets_launched_during_backward = 0;
  int64_t optimizer_state_bytes = 0;  // held after the step (a shard of it with sync.shard_optimizer)
  int64_t step = 0;  // after the step
  int64_t epoch = 0;
};

// Laps of one step: Lap() returns the seconds since the previous lap (or
// the start) and starts the next one. steady_clock, a few calls per step.
class StepTimer {
 public:
  StepTimer() : start_(std::chrono::steady_clock::now()), lap_(start_) {}
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - lap_).count();
    lap_ = now;
    return seconds;
  }
  double Total() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point lap_;
};

class TrainerMetrics {
 public:
  TrainerMetrics(prometheus::Registry& registry, const TrainerMetricsLabels& labels);

  void ObserveStep(const StepStats& stats);
  void SetMembership(int64_t world_size, int64_t generation);
  // The mean training loss since the last progress report.
  void SetLoss(double loss);
  void SetEval(const std::map<std::string, double>& metrics);
  void SetLastCheckpoint(double unix_seconds);
  // Cumulative sync traffic (both sync modes): rounds, bytes per sample.
  void ObserveSyncTraffic(const SyncTraffic& traffic);
  // A generation failed under this trainer, which goes on to the next one.
  void ObserveGenerationFailure();
  // A wait on the peers lasted half the collective timeout: this rank posted
  // its waiting mark (generation/waiting_mark.h).
  void ObserveLongWait();
  // A checkpoint write failed (the job goes on unless checkpoint.on_failure is fail).
  void ObserveCheckpointFailure();
  // A step dropped for a non-finite loss or gradient (on_nonfinite: skip_step).
  void ObserveNonFiniteSkip();
  // The trainer loaded its dataset and built its model (once per process).
  void ObserveContextLoad(double seconds);
  // Joining a generation until it was ready to train (communicators, healing).
  void ObserveReform(double seconds);
  // The device's caching allocator's peak reserved bytes; negative: unknown
  // (a CPU job, or a LibTorch without the accelerator statistics), not exported.
  void SetDeviceMemoryPeak(int64_t bytes);
  // Rank 0, at each commit point with 2+ ranks: the slowest rank of the last
  // log interval and the share of a step the others wait for it
  // (straggler.h). Absent until the first.
  void SetStraggler(int64_t rank, double holdback_fraction);
  // This rank's samples per step (sync.shares, batch_shares.h): set when a
  // generation starts and when throughput shares are re-planned.
  void SetBatchShare(int64_t samples);
  // Mode average with overlapped rounds: tau now (sync.overlap_steps, or
  // what auto chose).
  void SetOverlapSteps(int64_t steps);
  // Mode average with int8 rounds: whether they gather (one hop) or
  // all-reduce (round_shape.h).
  void SetGatherRounds(bool gather);
  // cuda_graphs: a generation ran its steps eagerly for `reason`
  // (step_capture_policy.h's labels).
  void ObserveCudaGraphFallback(const char* reason);
  // At each log interval: the host's seconds per step (the step loop's own
  // time) and, on cuda, the device stream's (CUDA events over the interval;
  // negative: unknown, not exported). Close together: launch-bound.
  void SetStepTimes(double host_seconds, double device_seconds);

 private:
  const std::map<std::string, std::string> labels_;  // first: the series below are built from it
  prometheus::Counter& samples_;
  prometheus::Counter& steps_;
  prometheus::Histogram& step_duration_;
  prometheus::Counter& forward_;
  prometheus::Counter& backward_;
  prometheus::Counter& optimizer_;
  prometheus::Counter& allreduce_wait_;
  prometheus::Counter& allreduce_bytes_;
  prometheus::Counter& compute_;
  prometheus::Counter& buckets_during_backward_;
  prometheus::Gauge& loss_;
  prometheus::Gauge& epoch_;
  prometheus::Gauge& step_;
  prometheus::Gauge& world_size_;
  prometheus::Gauge& generation_;
  prometheus::Counter& generation_failures_;
  prometheus::Counter& long_waits_;
  prometheus::Counter& checkpoint_failures_;
  prometheus::Counter& nonfinite_skips_;
  prometheus::Counter& context_loads_;
  prometheus::Gauge& context_load_seconds_;
  prometheus::Gauge& reform_seconds_;
  prometheus::Gauge& last_checkpoint_;
  prometheus::Family<prometheus::Gauge>& eval_;
  prometheus::Counter& averaging_rounds_;
  prometheus::Gauge& bytes_per_sample_;
  prometheus::Gauge& round_interval_;
  prometheus::Gauge& optimizer_state_bytes_;
  // Added at the first known value: absent, not 0, where nobody can tell.
  prometheus::Family<prometheus::Gauge>& device_memory_peak_bytes_;
  prometheus::Family<prometheus::Gauge>& straggler_rank_;
  prometheus::Family<prometheus::Gauge>& straggler_holdback_;
  prometheus::Gauge& batch_share_;
  // Averaging rounds' phases (round_timeline.h), summed over rounds.
  prometheus::Family<prometheus::Counter>& round_phase_family_;
  struct PhaseCounter {
    double RoundTimeline::*field;
    prometheus::Counter* counter;
    double seen;
  };
  std::vector<PhaseCounter> round_phases_;
  prometheus::Gauge& overlap_steps_;
  prometheus::Gauge& gather_rounds_;
  prometheus::Family<prometheus::Gauge>& window_bytes_;
  prometheus::Family<prometheus::Gauge>& rtt_seconds_;
  int64_t rounds_seen_ = 0;
  prometheus::Family<prometheus::Counter>& cuda_graph_fallbacks_;
  // Both added at the first log interval: absent before any step was timed.
  prometheus::Family<prometheus::Gauge>& host_step_seconds_;
  prometheus::Family<prometheus::Gauge>& device_step_seconds_;
};

}  // namespace herd
