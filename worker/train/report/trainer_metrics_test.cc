#include "worker/train/report/trainer_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <map>
#include <set>

namespace herd {
namespace {

using prometheus::MetricFamily;

std::map<std::string, MetricFamily> ByName(const std::vector<MetricFamily>& families) {
  std::map<std::string, MetricFamily> out;
  for (const auto& family : families) out[family.name] = family;
  return out;
}

std::string Label(const prometheus::ClientMetric& metric, const std::string& name) {
  for (const auto& label : metric.label) {
    if (label.name == name) return label.value;
  }
  return "<none>";
}

TEST(TrainerMetrics, CudaGraphFallbacksAreCountedByReason) {
  prometheus::Registry registry;
  TrainerMetrics metrics(registry, {"job-1", 0, "worker-2"});
  metrics.ObserveCudaGraphFallback("cpu_device");
  metrics.ObserveCudaGraphFallback("cpu_device");
  metrics.ObserveCudaGraphFallback("capture_failed");
  auto families = ByName(registry.Collect());
  ASSERT_EQ(families.count("herd_train_cuda_graph_fallbacks_total"), 1u);
  std::map<std::string, double> by_reason;
  for (const auto& m : families["herd_train_cuda_graph_fallbacks_total"].metric) {
    by_reason[Label(m, "reason")] = m.counter.value;
    EXPECT_EQ(Label(m, "job"), "job-1");
  }
  EXPECT_EQ(by_reason, (std::map<std::string, double>{{"cpu_device", 2}, {"capture_failed", 1}}));
}

// Host time per step always; device time only where it is known (cuda).
TEST(TrainerMetrics, DeviceStepTimeAppearsOnlyOnceKnown) {
  prometheus::Registry registry;
  TrainerMetrics metrics(registry, {"job-1", 0, "worker-2"});
  EXPECT_EQ(ByName(registry.Collect()).count("herd_train_host_step_seconds"), 0u);  // no interval yet
  metrics.SetStepTimes(0.002, -1);
  auto families = ByName(registry.Collect());
  EXPECT_EQ(families.count("herd_train_device_step_seconds"), 0u);
  ASSERT_EQ(families.count("herd_train_host_step_seconds"), 1u);
  EXPECT_EQ(families["herd_train_host_step_seconds"].metric[0].gauge.value, 0.002);
  metrics.SetStepTimes(0.001, 0.0005);
  families = ByName(registry.Collect());
  ASSERT_EQ(families.count("herd_train_device_step_seconds"), 1u);
  EXPECT_EQ(families["herd_train_device_step_seconds"].metric[0].gauge.value, 0.0005);
}

// Absent, not 0, until a peak is known: a CPU job has none to report.
TEST(TrainerMetrics, DeviceMemoryPeakAppearsOnlyOnceKnown) {
  prometheus::Registry registry;
  TrainerMetrics metrics(registry, {"job-1", 3, "worker-2"});
  metrics.SetDeviceMemoryPeak(-1);
  EXPECT_EQ(ByName(registry.Collect()).count("herd_train_device_memory_peak_bytes"), 0u);
  metrics.SetDeviceMemoryPeak(123456789);
  metrics.SetDeviceMemoryPeak(-1);  // an unknown reading keeps the last known peak
  auto families = ByName(registry.Collect());
  ASSERT_EQ(families.count("herd_train_device_memory_peak_bytes"), 1u);
  const auto& family = families["herd_train_device_memory_peak_bytes"];
  ASSERT_EQ(family.metric.size(), 1u);
  EXPECT_EQ(family.metric[0].gauge.value, 123456789.0);
  EXPECT_EQ(Label(family.metric[0], "job"), "job-1");
  EXPECT_EQ(Label(family.metric[0], "rank"), "3");
}

// Rank 0 names the slowest rank once it has measured one: absent before
// (and always with one rank), then the latest interval's.
TEST(TrainerMetrics, StragglerGaugesAppearOnlyOnceMeasured) {
  prometheus::Registry registry;
  TrainerMetrics metrics(registry, {"job-1", 0, "worker-0"});
  auto families = ByName(registry.Collect());
  EXPECT_EQ(families.count("herd_train_straggler_rank"), 0u);
  EXPECT_EQ(families.count("herd_train_straggler_holdback_ratio"), 0u);
  metrics.SetStraggler(1, 0.1);
  metrics.SetStraggler(2, 0.48);
  families = ByName(registry.Collect());
  ASSERT_EQ(families.count("herd_train_straggler_rank"), 1u);
  ASSERT_EQ(families.count("herd_train_straggler_holdback_ratio"), 1u);
  ASSERT_EQ(families["herd_train_straggler_rank"].metric.size(), 1u);
  EXPECT_EQ(families["herd_train_straggler_rank"].metric[0].gauge.value, 2);
  EXPECT_EQ(families["herd_train_straggler_holdback_ratio"].metric[0].gauge.value, 0.48);
  EXPECT_EQ(families["herd_train_straggler_rank"].type, prometheus::MetricType::Gauge);
  EXPECT_EQ(Label(families["herd_train_straggler_rank"].metric[0], "job"), "job-1");
  EXPECT_EQ(Label(families["herd_train_straggler_rank"].metric[0], "rank"), "0");
}

TEST(TrainerMetrics, EverySeriesCarriesJobRankAndWorker) {
  prometheus::Registry registry;
  TrainerMetrics metrics(registry, {"job-1", 3, "worker-2"});
  metrics.SetEval({{"accuracy", 0.5}, {"loss", 1.5}});
  auto families = ByName(registry.Collect());
  const std::set<std::string> expected = {
      "herd_train_samples_total",
      "herd_train_steps_total",
      "herd_train_step_duration_seconds",
      "herd_train_forward_seconds_total",
      "herd_train_backward_seconds_total",
      "herd_train_optimizer_seconds_total",
      "herd_train_allreduce_wait_seconds_total",
      "herd_train_allreduce_bytes_total",
      "herd_train_compute_seconds_total",
      "herd_train_buckets_launched_during_backward_total",
      "herd_train_loss",
      "herd_train_nonfinite_steps_skipped_total",
      "herd_train_epoch",
      "herd_train_step",
      "herd_train_world_size",
      "herd_train_generation",
      "herd_train_generation_failures_total",
      "herd_train_long_waits_total",
      "herd_train_checkpoint_failures_total",
      "herd_train_context_loads_total",
      "herd_train_context_load_seconds",
      "herd_train_reform_seconds",
      "herd_train_last_checkpoint_timestamp_seconds",
      "herd_train_eval",
      "herd_train_averaging_rounds_total",
      "herd_train_sync_bytes_per_sample",
      "herd_train_averaging_round_interval_seconds",
      "herd_train_optimizer_state_bytes",
      "herd_train_batch_share_samples",
      "herd_train_averaging_round_phase_seconds_total",
      "herd_train_averaging_overlap_steps",
      "herd_train_averaging_gather_rounds",
  };
  std::set<std::string> names;
  for (const auto& [name, family] : families) names.insert(name);
  EXPECT_EQ(names, expected);
  for (const auto& [name, family] : families) {
    SCOPED_TRACE(name);
    EXPECT_FALSE(family.help.empty());
    ASSERT_FALSE(family.metric.empty());
    for (const auto& metric : family.metric) {
      EXPECT_EQ(Label(metric, "job"), "job-1");
      EXPECT_EQ(Label(metric, "rank"), "3");
      EXPECT_EQ(Label(metric, "worker"), "worker-2");
    }
  }
  // Values exist before the first step: 0 until known (no checkpoint yet).
  EXPECT_EQ(families["herd_train_last_checkpoint_timestamp_seconds"].metric[0].gauge.value, 0);
  EXPECT_EQ(families["herd_train_step_duration_seconds"].type, prometheus::MetricType::Histogram);
  EXPECT_EQ(families["herd_train_samples_total"].type, prometheus::MetricType::Counter);
  EXPECT_EQ(families["herd_train_loss"].type, prometheus::MetricType::Gauge);
}

TEST(TrainerMetrics, StepsAccumulate) {
  prometheus::Registry registry;
  TrainerMetrics metrics(registry, {"j", 0, "w"});
  StepStats stats;
  stats.local_samples = 16;
  stats.step_seconds = 0.02;
  stats.forward_seconds = 0.005;
  stats.backward_seconds = 0.01;
  stats.optimizer_seconds = 0.001;
  stats.allreduce_wait_seconds = 0.003;
  stats.compute_seconds = 0.017;
  stats.allreduce_bytes = 1000;
  stats.buckets_launched_during_backward = 2;
  stats.step = 1;
  stats.epoch = 0;
  stats.optimizer_state_bytes = 4096;
  metrics.ObserveStep(stats);
  stats.step = 2;
  stats.epoch = 1;
  stats.step_seconds = 3;
  stats.optimizer_state_bytes = 2048;  // a gauge: the latest step's holding
  metrics.ObserveStep(stats);
  metrics.SetMembership(4, 2);
  metrics.SetLoss(0.25);
  metrics.SetEval({{"accuracy", 0.75}});
  metrics.SetEval({{"accuracy", 0.8}});
  metrics.SetLastCheckpoint(1700000000);

  auto families = ByName(registry.Collect());
  auto value = [&](const std::string& name) {
    const auto& metric = families.at(name).metric.at(0);
    return families.at(name).type == prometheus::MetricType::Counter ? metric.counter.value : metric.gauge.value;
  };
  EXPECT_EQ(value("herd_train_samples_total"), 32);
  EXPECT_EQ(value("herd_train_steps_total"), 2);
  EXPECT_DOUBLE_EQ(value("herd_train_forward_seconds_total"), 0.01);
  EXPECT_DOUBLE_EQ(value("herd_train_backward_seconds_total"), 0.02);
  EXPECT_DOUBLE_EQ(value("herd_train_optimizer_seconds_total"), 0.002);
  EXPECT_DOUBLE_EQ(value("herd_train_allreduce_wait_seconds_total"), 0.006);
  EXPECT_DOUBLE_EQ(value("herd_train_compute_seconds_total"), 0.034);
  EXPECT_EQ(value("herd_train_allreduce_bytes_total"), 2000);
  EXPECT_EQ(value("herd_train_buckets_launched_during_backward_total"), 4);
  EXPECT_EQ(value("herd_train_step"), 2);
  EXPECT_EQ(value("herd_train_epoch"), 1);
  EXPECT_EQ(value("herd_train_optimizer_state_bytes"), 2048);
  EXPECT_EQ(value("herd_train_world_size"), 4);
  EXPECT_EQ(value("herd_train_generation"), 2);
  EXPECT_EQ(value("herd_train_loss"), 0.25);
  EXPECT_EQ(value("herd_train_last_checkpoint_timestamp_seconds"), 1700000000);

  const auto& eval = families.at("herd_train_eval").metric;
  ASSERT_EQ(eval.size(), 1u);  // the second evaluation updated the same series
  EXPECT_EQ(Label(eval[0], "metric"), "accuracy");
  EXPECT_EQ(eval[0].gauge.value, 0.8);

  const auto& histogram = families.at("herd_train_step_duration_seconds").metric.at(0).histogram;
  EXPECT_EQ(histogram.sample_count, 2u);
  EXPECT_DOUBLE_EQ(histogram.sample_sum, 3.02);
  // 0.02 s falls in the 0.025 bucket, 3 s only from the 5 s bucket on.
  for (const auto& bucket : histogram.bucket) {
    const uint64_t want = bucket.upper_bound < 0.02 ? 0 : bucket.upper_bound < 3 ? 1 : 2;
    EXPECT_EQ(bucket.cumulative_count, want) << bucket.upper_bound;
  }
}

TEST(TrainerMetrics, SyncTrafficCountsRoundsAndBytesPerSample) {
  prometheus::Registry registry;
  TrainerMetrics metrics(registry, {"j", 1, "w"});
  SyncTraffic traffic;
  traffic.samples = 100;
  traffic.wire_bytes = 5000;
  traffic.averaging_rounds = 2;
  traffic.last_round_interval_seconds = 0.5;
  metrics.ObserveSyncTraffic(traffic);
  metrics.ObserveSyncTraffic(traffic);  // no new round: nothing counted twice
  traffic.samples = 200;
  traffic.averaging_rounds = 3;
  traffic.last_round_interval_seconds = 0.7;
  metrics.ObserveSyncTraffic(traffic);
  auto families = ByName(registry.Collect());
  EXPECT_EQ(families.at("herd_train_averaging_rounds_total").metric.at(0).counter.value, 3);
  EXPECT_EQ(families.at("herd_train_sync_bytes_per_sample").metric.at(0).gauge.value, 25);
  EXPECT_EQ(families.at("herd_train_averaging_round_interval_seconds").metric.at(0).gauge.value, 0.7);
}

// Each phase's counter grows by what the rounds since the last call added;
// the window and RTT gauges appear once a TCP round reported them.
TEST(TrainerMetrics, RoundPhasesAccumulateByPhaseAndTheWindowAppearsOnceKnown) {
  prometheus::Registry registry;
  TrainerMetrics metrics(registry, {"job-1", 1, "worker-1"});
  SyncTraffic traffic;
  RoundTimeline round;
  round.reduce_scatter_seconds = 0.3;
  round.all_gather_seconds = 0.1;
  round.blocked_seconds = 0.02;
  traffic.round_phases.Add(round);
  traffic.averaging_rounds = 1;
  metrics.ObserveSyncTraffic(traffic);
  EXPECT_EQ(ByName(registry.Collect()).count("herd_train_data_plane_window_bytes"), 0u);
  round.window_bytes = 14480;
  round.rtt_seconds = 0.2;
  traffic.round_phases.Add(round);
  traffic.averaging_rounds = 2;
  metrics.ObserveSyncTraffic(traffic);
  metrics.ObserveSyncTraffic(traffic);  // nothing new: nothing added
  metrics.SetOverlapSteps(13);
  metrics.SetGatherRounds(true);
  auto families = ByName(registry.Collect());
  std::map<std::string, double> by_phase;
  for (const auto& metric : families["herd_train_averaging_round_phase_seconds_total"].metric) {
    by_phase[Label(metric, "phase")] = metric.counter.value;
    EXPECT_EQ(Label(metric, "job"), "job-1");
  }
  EXPECT_DOUBLE_EQ(by_phase["reduce_scatter"], 0.6);
  EXPECT_DOUBLE_EQ(by_phase["all_gather"], 0.2);
  EXPECT_DOUBLE_EQ(by_phase["blocked"], 0.04);
  EXPECT_DOUBLE_EQ(by_phase["launch"], 0);
  EXPECT_EQ(by_phase.size(), 8u);
  ASSERT_EQ(families.count("herd_train_data_plane_window_bytes"), 1u);
  EXPECT_EQ(families["herd_train_data_plane_window_bytes"].metric[0].gauge.value, 14480);
  EXPECT_EQ(families["herd_train_data_plane_rtt_seconds"].metric[0].gauge.value, 0.2);
  EXPECT_EQ(families["herd_train_averaging_overlap_steps"].metric[0].gauge.value, 13);
  EXPECT_EQ(families["herd_train_averaging_gather_rounds"].metric[0].gauge.value, 1);
}

TEST(StepTimer, LapsAddUpToTheTotal) {
  StepTimer timer;
  double laps = 0;
  for (int i = 0; i < 3; ++i) {
    volatile double sink = 0;
    for (int j = 0; j < 100000; ++j) sink = sink + j;
    const double lap = timer.Lap();
    EXPECT_GE(lap, 0);
    laps += lap;
  }
  EXPECT_LE(laps, timer.Total());
  EXPECT_GT(laps, 0);
}

}  // namespace
}  // namespace herd
