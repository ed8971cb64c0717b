// Where training stands (step, epoch, samples into the epoch) and the two
// rules that move it: a step advances the position by the samples it trained
// (an epoch ends once its samples are used up), and training is done at a
// step or epoch limit. Pure, so the trainer's step and the batch prefetcher's
// look-ahead (which must agree on the next step's position) share one rule.
#pragma once

#include <algorithm>

#include <cstdint>

namespace herd {

struct TrainingPosition {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t samples_in_epoch = 0;
};

// The position after one more step of `step_samples` samples in an epoch of
// `epoch_size` samples: the next epoch at its start once this one is used up.
inline TrainingPosition AdvancedByStep(TrainingPosition pos, int64_t step_samples, int64_t epoch_size) {
  ++pos.step;
  pos.samples_in_epoch += step_samples;
  if (pos.samples_in_epoch >= epoch_size) {
    ++pos.epoch;
    pos.samples_in_epoch = 0;
  }
  return pos;
}

// Whether training is over at `pos`: a positive max_steps or epochs is a limit.
inline bool DoneAt(const TrainingPosition& pos, int64_t max_steps, int64_t epochs) {
  return (max_steps > 0 && pos.step >= max_steps) || (epochs > 0 && pos.epoch >= epochs);
}

// The job's last step as seen from `pos`: the steps left at `per_step`
// samples a step (the current world size's) over what remains of the
// epochs, capped by a positive max_steps.
inline int64_t LastStepFrom(const TrainingPosition& pos, int64_t epoch_size, int64_t per_step, int64_t epochs,
                            int64_t max_steps) {
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  int64_t total = 0;
  if (epochs > 0 && pos.epoch < epochs) {
    total = pos.step + ceil_div(epoch_size - pos.samples_in_epoch, per_step) +
            (epochs - pos.epoch - 1) * ceil_div(epoch_size, per_step);
  } else if (epochs > 0) {
    total = pos.step;
  }
  if (max_steps > 0) total = total > 0 ? std::min(total, max_steps) : max_steps;
  return total;
}

}  // namespace herd
