#include "worker/train/report/step_time_window.h"

#include <gtest/gtest.h>

#include <vector>

namespace herd {
namespace {

// A device clock the test sets: what CUDA events would measure.
class FakeDeviceTimer : public DeviceIntervalTimer {
 public:
  explicit FakeDeviceTimer(std::vector<const char*>* calls, double seconds) : calls_(calls), seconds_(seconds) {}
  void Start() override { calls_->push_back("start"); }
  void Stop() override { calls_->push_back("stop"); }
  std::optional<double> Seconds() override { return seconds_; }

 private:
  std::vector<const char*>* calls_;
  double seconds_;
};

TEST(StepTimeWindow, CpuHasHostTimeOnly) {
  StepTimeWindow window(MakeDeviceIntervalTimer(torch::Device(torch::kCPU)));
  for (double s : {0.01, 0.03}) {
    window.BeforeStep();
    window.AfterStep(s);
  }
  const auto times = window.Close();
  ASSERT_TRUE(times.has_value());
  EXPECT_EQ(times->steps, 2);
  EXPECT_DOUBLE_EQ(times->host_seconds_per_step, 0.02);
  EXPECT_FALSE(times->device_seconds_per_step.has_value());
  EXPECT_FALSE(window.Close().has_value());  // a new, empty window
}

TEST(StepTimeWindow, DeviceTimeSpansTheWindowOncePerInterval) {
  std::vector<const char*> calls;
  StepTimeWindow window(std::make_unique<FakeDeviceTimer>(&calls, 0.4));
  for (int i = 0; i < 4; ++i) {
    window.BeforeStep();
    window.AfterStep(0.05);
  }
  const auto times = window.Close();
  ASSERT_TRUE(times.has_value());
  ASSERT_TRUE(times->device_seconds_per_step.has_value());
  EXPECT_DOUBLE_EQ(*times->device_seconds_per_step, 0.1);
  EXPECT_DOUBLE_EQ(times->host_seconds_per_step, 0.05);
  // One event pair for the interval, not one per step.
  EXPECT_EQ(calls, (std::vector<const char*>{"start", "stop"}));
  window.BeforeStep();
  EXPECT_EQ(calls.size(), 3u);
}

}  // namespace
}  // namespace herd
