#include "worker/train/report/step_time_window.h"

#include <utility>

namespace herd {

StepTimeWindow::StepTimeWindow(std::unique_ptr<DeviceIntervalTimer> device) : device_(std::move(device)) {}

void StepTimeWindow::BeforeStep() {
  if (open_) return;
  device_->Start();
  open_ = true;
}

void StepTimeWindow::AfterStep(double host_seconds) {
  ++steps_;
  host_seconds_ += host_seconds;
}

std::optional<StepTimes> StepTimeWindow::Close() {
  if (!open_ || steps_ == 0) {
    open_ = false;
    steps_ = 0;
    host_seconds_ = 0;
    return std::nullopt;
  }
  device_->Stop();
  StepTimes times;
  times.steps = steps_;
  times.host_seconds_per_step = host_seconds_ / static_cast<double>(steps_);
  if (auto device = device_->Seconds(); device.has_value()) {
    times.device_seconds_per_step = *device / static_cast<double>(steps_);
  }
  open_ = false;
  steps_ = 0;
  host_seconds_ = 0;
  return times;
}

}  // namespace herd
