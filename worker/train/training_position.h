// Where training stands (step, epoch, samples into the epoch) and the two
// rules that move it: a step advances the position by the samples it trained
// (an epoch ends once its samples are used up), and training is done at a
// step or epoch limit. Pure, so the trainer's step and the batch prefetcher's
// look-ahead (which must agree on the next step's position) share one rule.
#pragma once

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

}  // namespace herd
