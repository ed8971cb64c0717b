#include "worker/contract/trainer_contract.h"
#include "worker/train/report/metrics_snapshot.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "worker/train/report/metrics_snapshot_writer.h"
#include "worker/train/report/trainer_metrics.h"

namespace herd {
namespace {

namespace fs = std::filesystem;
using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/snapshot.XXXXXX";
  return mkdtemp(pattern.data());
}

// Field by field, doubles compared exactly: the snapshot must not round.
void ExpectSameFamilies(const std::vector<MetricFamily>& want, const std::vector<MetricFamily>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t f = 0; f < want.size(); ++f) {
    SCOPED_TRACE(want[f].name);
    EXPECT_EQ(want[f].name, got[f].name);
    EXPECT_EQ(want[f].help, got[f].help);
    EXPECT_EQ(want[f].type, got[f].type);
    ASSERT_EQ(want[f].metric.size(), got[f].metric.size());
    for (size_t m = 0; m < want[f].metric.size(); ++m) {
      const ClientMetric& a = want[f].metric[m];
      const ClientMetric& b = got[f].metric[m];
      EXPECT_EQ(a.label, b.label);
      EXPECT_EQ(a.timestamp_ms, b.timestamp_ms);
      EXPECT_EQ(a.counter.value, b.counter.value);
      EXPECT_EQ(a.gauge.value, b.gauge.value);
      EXPECT_EQ(a.untyped.value, b.untyped.value);
      EXPECT_EQ(a.histogram.sample_count, b.histogram.sample_count);
      EXPECT_EQ(a.histogram.sample_sum, b.histogram.sample_sum);
      ASSERT_EQ(a.histogram.bucket.size(), b.histogram.bucket.size());
      for (size_t i = 0; i < a.histogram.bucket.size(); ++i) {
        EXPECT_EQ(a.histogram.bucket[i].cumulative_count, b.histogram.bucket[i].cumulative_count);
        EXPECT_EQ(a.histogram.bucket[i].upper_bound, b.histogram.bucket[i].upper_bound);
      }
      EXPECT_EQ(a.summary.sample_count, b.summary.sample_count);
      EXPECT_EQ(a.summary.sample_sum, b.summary.sample_sum);
      ASSERT_EQ(a.summary.quantile.size(), b.summary.quantile.size());
      for (size_t i = 0; i < a.summary.quantile.size(); ++i) {
        EXPECT_EQ(a.summary.quantile[i].quantile, b.summary.quantile[i].quantile);
        EXPECT_EQ(a.summary.quantile[i].value, b.summary.quantile[i].value);
      }
    }
  }
}

// One family of every type, with values that a decimal format would round.
std::vector<MetricFamily> EveryType() {
  std::vector<MetricFamily> families(5);
  families[0] = {"a_total", "A counter.", MetricType::Counter, {}};
  ClientMetric counter;
  counter.label = {{"job", "j-1"}, {"rank", "0"}, {"worker", "w\"0\n"}};
  counter.counter.value = 0.1 + 0.2;
  families[0].metric.push_back(counter);
  counter.label[1].value = "1";
  counter.counter.value = 1e300;
  families[0].metric.push_back(counter);

  families[1] = {"b", "A gauge.", MetricType::Gauge, {}};
  ClientMetric gauge;
  gauge.gauge.value = -std::numeric_limits<double>::denorm_min();
  gauge.timestamp_ms = 1700000000123;
  families[1].metric.push_back(gauge);

  families[2] = {"c_seconds", "A histogram.", MetricType::Histogram, {}};
  ClientMetric histogram;
  histogram.label = {{"job", "x"}};
  histogram.histogram.sample_count = (uint64_t{1} << 60) + 3;
  histogram.histogram.sample_sum = 1.0 / 3;
  histogram.histogram.bucket = {
      {1, 0.001}, {5, 0.1}, {(uint64_t{1} << 60) + 3, std::numeric_limits<double>::infinity()}};
  families[2].metric.push_back(histogram);

  families[3] = {"d", "A summary.", MetricType::Summary, {}};
  ClientMetric summary;
  summary.summary.sample_count = 7;
  summary.summary.sample_sum = 2.5;
  summary.summary.quantile = {{0.5, 1.25}, {0.99, std::nan("")}};
  families[3].metric.push_back(summary);

  families[4] = {"e", "", MetricType::Untyped, {}};
  ClientMetric untyped;
  untyped.untyped.value = 42;
  families[4].metric.push_back(untyped);
  return families;
}

TEST(MetricsSnapshot, RoundTripsEveryTypeExactly) {
  std::vector<MetricFamily> families = EveryType();
  std::string bytes;
  ASSERT_TRUE(ToSnapshot(families).SerializeToString(&bytes));
  metrics::v1::MetricsSnapshot parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  std::vector<MetricFamily> back = FromSnapshot(parsed);
  // NaN != NaN: compare the quantile apart, then as a non-NaN.
  ASSERT_EQ(back.size(), 5u);
  EXPECT_TRUE(std::isnan(back[3].metric[0].summary.quantile[1].value));
  families[3].metric[0].summary.quantile[1].value = 0;
  back[3].metric[0].summary.quantile[1].value = 0;
  ExpectSameFamilies(families, back);
}

TEST(MetricsSnapshot, FileRoundTripOfARealRegistry) {
  prometheus::Registry registry;
  TrainerMetrics metrics(registry, {"job-7", 1, "worker-1"});
  metrics.SetMembership(2, 3);
  metrics.SetEval({{"accuracy", 0.875}, {"loss", 0.3}});
  StepStats step;
  step.local_samples = 32;
  step.step_seconds = 0.0123;
  step.allreduce_bytes = 7654321;
  step.step = 11;
  metrics.ObserveStep(step);
  step.step_seconds = 7;
  metrics.ObserveStep(step);

  const std::string path = MetricsSnapshotPath(TempDir());
  ASSERT_TRUE(WriteMetricsSnapshot(path, registry.Collect()).ok());
  auto back = ReadMetricsSnapshot(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameFamilies(registry.Collect(), *back);
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(path).parent_path())) files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(MetricsSnapshot, MissingAndCorruptFilesAreErrors) {
  const std::string dir = TempDir();
  EXPECT_TRUE(absl::IsNotFound(ReadMetricsSnapshot(dir + "/none").status()));
  std::ofstream(dir + "/bad") << "\xff\xff\xff not a snapshot";
  EXPECT_TRUE(absl::IsDataLoss(ReadMetricsSnapshot(dir + "/bad").status()));
  EXPECT_FALSE(WriteMetricsSnapshot(dir + "/no/such/dir/file", EveryType()).ok());
}

// A snapshot whose values no trainer writes is refused, naming the field and
// the value; a diverged gauge (NaN loss) is faithful and passes.
TEST(MetricsSnapshot, MalformedValuesAreRefusedNamingFieldAndValue) {
  const std::string dir = TempDir();
  auto refusal = [&](std::vector<MetricFamily> families) {
    std::string bytes;
    EXPECT_TRUE(ToSnapshot(families).SerializeToString(&bytes));
    std::ofstream(dir + "/snap", std::ios::binary | std::ios::trunc) << bytes;
    auto read = ReadMetricsSnapshot(dir + "/snap");
    return read.ok() ? std::string() : std::string(read.status().message());
  };
  std::vector<MetricFamily> families = EveryType();
  families[1].metric[0].gauge.value = std::nan("");
  EXPECT_EQ(refusal(families), "");

  families = EveryType();
  families[0].metric[1].counter.value = -1;
  EXPECT_NE(refusal(families).find("families[0].metrics[1].value: a counter must be finite and >= 0, got -1"),
            std::string::npos)
      << refusal(families);
  families = EveryType();
  families[0].metric[0].counter.value = std::nan("");
  EXPECT_NE(refusal(families).find("families[0].metrics[0].value: a counter must be finite and >= 0, got nan"),
            std::string::npos);
  families = EveryType();
  families[2].metric[0].histogram.bucket[1].upper_bound = std::nan("");
  EXPECT_NE(refusal(families).find("families[2].metrics[0].buckets[1].upper_bound"), std::string::npos);
  families = EveryType();
  families[2].metric[0].histogram.bucket[1].cumulative_count = 0;
  EXPECT_NE(refusal(families).find("families[2].metrics[0].buckets[1].cumulative_count"), std::string::npos);
  families = EveryType();
  families[3].metric[0].summary.quantile[0].quantile = 1.5;
  EXPECT_NE(refusal(families).find("families[3].metrics[0].quantiles[0].quantile: must be in [0, 1], got 1.5"),
            std::string::npos);
  families = EveryType();
  families[1].name = "not a name";
  EXPECT_NE(refusal(families).find("families[1].name: not a metric name: 'not a name'"), std::string::npos);
  families = EveryType();
  families[1].metric[0].timestamp_ms = -5;
  EXPECT_NE(refusal(families).find("families[1].metrics[0].timestamp_ms: must be >= 0, got -5"), std::string::npos);
}

double StepsInSnapshot(const std::string& path) {
  auto families = ReadMetricsSnapshot(path);
  if (!families.ok()) return -1;
  for (const auto& family : *families) {
    if (family.name == "herd_train_steps_total") return family.metric.at(0).counter.value;
  }
  return -2;
}

TEST(MetricsSnapshotWriter, KeepsTheFileFreshAndWritesOnceMoreAtTheEnd) {
  prometheus::Registry registry;
  TrainerMetrics metrics(registry, {"job", 0, "w"});
  const std::string path = MetricsSnapshotPath(TempDir());
  {
    MetricsSnapshotWriter writer(registry, {path, std::chrono::milliseconds(20)});
    // Written at start, before any step.
    for (int i = 0; i < 500 && StepsInSnapshot(path) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(StepsInSnapshot(path), 0);
    metrics.ObserveStep({});
    for (int i = 0; i < 500 && StepsInSnapshot(path) != 1; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(StepsInSnapshot(path), 1);
  }
  // The writer is gone; it wrote its last snapshot on the way out.
  MetricsSnapshotWriter slow(registry, {path, std::chrono::hours(1)});
  metrics.ObserveStep({});
  metrics.ObserveStep({});
  ASSERT_TRUE(slow.WriteNow().ok());
  EXPECT_EQ(StepsInSnapshot(path), 3);
  metrics.ObserveStep({});
  {
    MetricsSnapshotWriter last(registry, {path, std::chrono::hours(1)});
    metrics.ObserveStep({});
  }
  EXPECT_EQ(StepsInSnapshot(path), 5);
}

}  // namespace
}  // namespace herd
