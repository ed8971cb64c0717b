#include "worker/daemon/trainer_metrics_collector.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "worker/contract/trainer_contract.h"
#include "worker/train/report/metrics_snapshot.h"

namespace herd::worker {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/collector.XXXXXX";
  return mkdtemp(pattern.data());
}

MetricFamily Steps(const std::string& job, const std::string& rank, double value) {
  MetricFamily family{"herd_train_steps_total", "Steps.", MetricType::Counter, {}};
  ClientMetric metric;
  metric.label = {{"job", job}, {"rank", rank}, {"worker", "w0"}};
  metric.counter.value = value;
  family.metric.push_back(metric);
  return family;
}

MetricFamily StepDuration(const std::string& job) {
  MetricFamily family{"herd_train_step_duration_seconds", "Step time.", MetricType::Histogram, {}};
  ClientMetric metric;
  metric.label = {{"job", job}, {"rank", "0"}, {"worker", "w0"}};
  metric.histogram.sample_count = 3;
  metric.histogram.sample_sum = 0.75;
  metric.histogram.bucket = {{1, 0.1}, {3, std::numeric_limits<double>::infinity()}};
  family.metric.push_back(metric);
  return family;
}

// {family name: {job label: counter value or histogram count}}
std::map<std::string, std::map<std::string, double>> Summary(const std::vector<MetricFamily>& families) {
  std::map<std::string, std::map<std::string, double>> out;
  for (const auto& family : families) {
    EXPECT_EQ(out.count(family.name), 0u) << "family " << family.name << " appears twice";
    auto& series = out[family.name];
    for (const auto& metric : family.metric) {
      std::string key;
      for (const auto& label : metric.label)
        key += label.name == "job" || label.name == "rank" ? label.value + "/" : "";
      series[key] = family.type == MetricType::Histogram ? metric.histogram.sample_count : metric.counter.value;
    }
  }
  return out;
}

class CollectorTest : public ::testing::Test {
 protected:
  void Write(const std::string& dir, const std::vector<MetricFamily>& families) {
    ASSERT_TRUE(WriteMetricsSnapshot(MetricsSnapshotPath(dir), families).ok());
  }
  std::string root_ = TempDir();
  std::string dir_a_ = root_ + "/a";
  std::string dir_b_ = root_ + "/b";
  TrainerMetricsCollector collector_;

  void SetUp() override {
    std::filesystem::create_directories(dir_a_);
    std::filesystem::create_directories(dir_b_);
  }
};

TEST_F(CollectorTest, MergesTheRunningTrainersIntoOneFamilyPerName) {
  collector_.TrainerStarting("a", dir_a_);
  collector_.TrainerStarting("b", dir_b_);
  EXPECT_TRUE(collector_.Collect().empty());  // no snapshots yet: nothing, and no error
  Write(dir_a_, {Steps("a", "0", 5), StepDuration("a")});
  Write(dir_b_, {Steps("b", "1", 7), StepDuration("b")});
  auto summary = Summary(collector_.Collect());
  EXPECT_EQ(summary["herd_train_steps_total"], (std::map<std::string, double>{{"a/0/", 5}, {"b/1/", 7}}));
  EXPECT_EQ(summary["herd_train_step_duration_seconds"], (std::map<std::string, double>{{"a/0/", 3}, {"b/0/", 3}}));
  // Scrapes read the files afresh.
  Write(dir_a_, {Steps("a", "0", 6)});
  summary = Summary(collector_.Collect());
  EXPECT_EQ(summary["herd_train_steps_total"]["a/0/"], 6);
}

TEST_F(CollectorTest, AnExitedTrainerIsScrapedOnceMore) {
  collector_.TrainerStarting("a", dir_a_);
  Write(dir_a_, {Steps("a", "0", 9)});
  collector_.TrainerExited("a");
  // The job's next trainer reuses the folder: the exited one's figures were read at exit.
  std::filesystem::remove(MetricsSnapshotPath(dir_a_));
  EXPECT_EQ(Summary(collector_.Collect())["herd_train_steps_total"]["a/0/"], 9);
  EXPECT_TRUE(collector_.Collect().empty());
}

TEST_F(CollectorTest, AStartingTrainerDropsTheSnapshotOfTheLastOne) {
  Write(dir_a_, {Steps("a", "0", 100)});
  collector_.TrainerStarting("a", dir_a_);
  EXPECT_FALSE(std::filesystem::exists(MetricsSnapshotPath(dir_a_)));
  EXPECT_TRUE(collector_.Collect().empty());
}

TEST_F(CollectorTest, ARunningTrainerWinsOverAnExitedOneWithTheSameSeries) {
  collector_.TrainerStarting("a", dir_a_);
  Write(dir_a_, {Steps("a", "0", 50)});
  collector_.TrainerExited("a");
  collector_.TrainerStarting("a", dir_a_);
  Write(dir_a_, {Steps("a", "0", 2), Steps("a", "1", 3)});
  auto families = collector_.Collect();
  auto summary = Summary(families);
  EXPECT_EQ(summary["herd_train_steps_total"], (std::map<std::string, double>{{"a/0/", 2}, {"a/1/", 3}}));
}

TEST(MergeMetricFamilies, SkipsAFamilyWhoseTypeDiffers) {
  std::vector<MetricFamily> into = {Steps("a", "0", 1)};
  MetricFamily gauge = Steps("b", "0", 2);
  gauge.type = MetricType::Gauge;
  MergeMetricFamilies({gauge}, &into);
  ASSERT_EQ(into.size(), 1u);
  EXPECT_EQ(into[0].metric.size(), 1u);
}

TEST_F(CollectorTest, ServesThroughARegistryLikeExposition) {
  // What the Exposer does at scrape time: serialize every collectable's
  // families; one HELP/TYPE per name even with two trainers.
  collector_.TrainerStarting("a", dir_a_);
  collector_.TrainerStarting("b", dir_b_);
  Write(dir_a_, {Steps("a", "0", 5)});
  Write(dir_b_, {Steps("b", "0", 6)});
  const std::string text = prometheus::TextSerializer().Serialize(collector_.Collect());
  EXPECT_EQ(text.find("# TYPE herd_train_steps_total counter"), text.rfind("# TYPE herd_train_steps_total counter"));
  EXPECT_NE(text.find("herd_train_steps_total{job=\"a\",rank=\"0\",worker=\"w0\"} 5"), std::string::npos) << text;
  EXPECT_NE(text.find("herd_train_steps_total{job=\"b\",rank=\"0\",worker=\"w0\"} 6"), std::string::npos) << text;
}

}  // namespace
}  // namespace herd::worker
