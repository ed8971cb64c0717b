#include "worker/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace herd {

double LearningRateAt(const v1::ScheduleSpec& schedule, double base_lr, int64_t step, int64_t total_steps) {
  const int64_t warmup = schedule.warmup_steps();
  if (warmup > 0 && step < warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t after = step - warmup;
  if (schedule.name() == "cosine") {
    const int64_t span = std::max<int64_t>(1, total_steps - warmup);
    const double progress = std::min(1.0, static_cast<double>(after) / static_cast<double>(span));
    const double floor = schedule.min_lr();
    return floor + (base_lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  if (schedule.name() == "step" && schedule.step_size() > 0) {
    return base_lr * std::pow(schedule.gamma(), static_cast<double>(after / schedule.step_size()));
  }
  return base_lr;
}

}  // namespace herd
