// Host and device time per step over a log interval, side by side, so a
// run tells launch-bound (the GPU waits for the host: the two about equal)
// from compute-bound (device time well above the host's). Host time is the
// step loop's own (StepStats::step_seconds); device time is the stream's
// time between an event before the interval's first step and one after its
// last (cuda_step_graph.h), absent on the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "worker/train/step/cuda_step_graph.h"

namespace herd {

struct StepTimes {
  int64_t steps = 0;
  double host_seconds_per_step = 0;
  std::optional<double> device_seconds_per_step;
};

class StepTimeWindow {
 public:
  explicit StepTimeWindow(std::unique_ptr<DeviceIntervalTimer> device);

  // Before a step's first launch: starts the device timer at a window's first step.
  void BeforeStep();
  void AfterStep(double host_seconds);
  // At the log interval: the window's times (nullopt without steps), and a new window.
  std::optional<StepTimes> Close();

 private:
  std::unique_ptr<DeviceIntervalTimer> device_;
  int64_t steps_ = 0;
  double host_seconds_ = 0;
  bool open_ = false;
};

}  // namespace herd
