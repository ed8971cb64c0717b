// Straggler detection: which rank of a data-parallel job is the
// slowest over a log interval, and how much it holds the others back. A pure
// function of what every rank measured; the trainer all-gathers the inputs at
// each commit point (trainer.cc) and rank 0 reports the result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace herd {

// One rank's step time over one log interval, split in two:
// - wait_seconds: the time it spent waiting in gradient synchronization (the
//   sync strategy's exposed wait finishing the all-reduce; with sync mode
//   average, the averaging rounds), summed over the interval's steps;
// - compute_seconds: the rest of its step wall time (loading the batch,
//   forward, backward, optimizer, and any time the process did not run),
//   summed over the same steps;
// - steps: the steps in the interval.
// In lockstep training every rank's steps take about as long as the slowest
// rank's: a fast rank's extra time shows up as wait, the slow rank's as compute.
struct RankStepTimes {
  double compute_seconds = 0;
  double wait_seconds = 0;
  int64_t steps = 0;
};

struct StragglerSummary {
  int64_t rank = -1;                       // the rank with the largest compute per step (the lowest on ties)
  double compute_seconds_per_step = 0;     // that rank's
  double median_compute_seconds_per_step = 0;  // over all ranks (mean of the middle two for an even count)
  // The mean, over the other ranks, of their wait per step: how long the
  // slowest rank holds each of the others back per step.
  double others_wait_seconds_per_step = 0;
  double step_seconds = 0;  // mean over all ranks of (compute + wait) per step
  // others_wait_seconds_per_step / step_seconds, clamped to [0, 1]: the share
  // of a step the other ranks spend waiting.
  double holdback_fraction = 0;
};

// The slowest rank of `ranks` (indexed by rank). nullopt when there is no
// meaningful answer: fewer than 2 ranks, a rank without steps, a negative or
// non-finite time, or no step time at all.
std::optional<StragglerSummary> FindStraggler(const std::vector<RankStepTimes>& ranks);

// One log line's worth: each rank's compute and wait seconds per step over
// the interval, and its samples per step (`shares`, where given), e.g.
// "rank 0 1.482/0.022 s (4997), rank 1 ...". A rank without steps reads "-".
// Rank 0 logs it at each commit point, so the split behind a re-plan, and
// the waits of a run's timed steps alone, can be read off the log.
std::string DescribeStepTimes(const std::vector<RankStepTimes>& ranks, const std::vector<int64_t>& shares);

}  // namespace herd
