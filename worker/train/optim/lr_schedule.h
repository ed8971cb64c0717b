// Learning-rate schedules: linear warmup, then constant, cosine or step
// decay; or noam (its own warmup). A pure function of the step, so every
// rank (and a resumed run) agrees.
#pragma once

#include <cstdint>
#include <string>

#include "proto/herd.pb.h"

namespace herd {

// What a generation of `world_size` ranks trains with: optimizer.lr scaled
// by optimizer.scale_lr (linear: x W, sqrt: x sqrt(W), none: as is).
struct LearningRatePlan {
  double base_lr = 0;      // the scaled rate the schedule works on
  double warmup_from = 0;  // where warmup starts: the unscaled lr when scaling, else 0
  std::string Describe(const v1::OptimizerSpec& optimizer, int64_t world_size) const;
};

LearningRatePlan PlanLearningRate(const v1::OptimizerSpec& optimizer, int64_t world_size);

// The learning rate for optimizer step `step` (0-based) of `total_steps`.
double LearningRateAt(const v1::ScheduleSpec& schedule, const LearningRatePlan& plan, int64_t step,
                      int64_t total_steps);

}  // namespace herd
