#include "worker/train/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "common/spec_enums.h"

namespace herd {

LearningRatePlan PlanLearningRate(const v1::OptimizerSpec& optimizer, int64_t world_size) {
  const double lr = optimizer.lr();
  const double w = static_cast<double>(std::max<int64_t>(1, world_size));
  if (optimizer.scale_lr() == v1::SCALE_LR_LINEAR) return {lr * w, lr};
  if (optimizer.scale_lr() == v1::SCALE_LR_SQRT) return {lr * std::sqrt(w), lr};
  return {lr, 0};
}

std::string LearningRatePlan::Describe(const v1::OptimizerSpec& optimizer, int64_t world_size) const {
  if (optimizer.scale_lr() == v1::SCALE_LR_UNSPECIFIED || optimizer.scale_lr() == v1::SCALE_LR_NONE) {
    return absl::StrFormat("learning rate %g (optimizer.scale_lr none)", base_lr);
  }
  return absl::StrFormat("learning rate %g = %g scaled %s at world size %d", base_lr, optimizer.lr(),
                         SpecName(optimizer.scale_lr()), world_size);
}

double LearningRateAt(const v1::ScheduleSpec& schedule, const LearningRatePlan& plan, int64_t step,
                      int64_t total_steps) {
  const int64_t warmup = schedule.warmup_steps();
  const double base = plan.base_lr;
  if (schedule.name() == v1::SCHEDULE_NAME_NOAM) {
    // Vaswani et al.: rises linearly for warmup steps, then decays as 1/sqrt(step).
    const double s = static_cast<double>(step + 1);
    const double w = static_cast<double>(std::max<int64_t>(1, warmup));
    return base / std::sqrt(static_cast<double>(std::max<int64_t>(1, schedule.d_model()))) *
           std::min(1.0 / std::sqrt(s), s / (w * std::sqrt(w)));
  }
  if (warmup > 0 && step < warmup) {
    return plan.warmup_from + (base - plan.warmup_from) * static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  const int64_t after = step - warmup;
  if (schedule.name() == v1::SCHEDULE_NAME_COSINE) {
    const int64_t span = std::max<int64_t>(1, total_steps - warmup);
    const double progress = std::min(1.0, static_cast<double>(after) / static_cast<double>(span));
    const double floor = schedule.min_lr();
    return floor + (base - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  if (schedule.name() == v1::SCHEDULE_NAME_STEP && schedule.step_size() > 0) {
    return base * std::pow(schedule.gamma(), static_cast<double>(after / schedule.step_size()));
  }
  return base;
}

}  // namespace herd
