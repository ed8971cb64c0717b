// Learning-rate schedules: linear warmup, then constant, cosine or step decay.
// A pure function of the step, so every rank (and a resumed run) agrees.
#pragma once

#include <cstdint>

#include "proto/herd.pb.h"

namespace herd {

// The learning rate for optimizer step `step` (0-based) of `total_steps`.
double LearningRateAt(const v1::ScheduleSpec& schedule, double base_lr, int64_t step, int64_t total_steps);

}  // namespace herd
