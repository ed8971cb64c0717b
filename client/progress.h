// The live progress line of `herd watch` and its final summary.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "proto/herd.pb.h"

namespace herd::client {

// Steps per second as the watcher sees them, over a sliding window that
// starts when the step last moved: the time before training started (data
// loading, rendezvous) does not dilute the rate. Reset when the step goes
// backwards (a rollback to the last commit).
class StepRateTracker {
 public:
  explicit StepRateTracker(double window_seconds = 30) : window_seconds_(window_seconds) {}
  void Observe(double now, int64_t step);
  // Steps per second, or 0 until two observations at least 1 s apart.
  double StepsPerSecond() const;

 private:
  double window_seconds_;
  std::deque<std::pair<double, int64_t>> samples_;
};

// Seconds to the last step, from the observed step rate when known, else
// from samples_per_second and the samples one step consumes. Unknown
// (nullopt) without a total or a rate.
std::optional<double> EstimateEtaSeconds(const v1::JobInfo& job, double observed_steps_per_second);

// "[########............]" for `fraction` in [0, 1].
std::string ProgressBar(double fraction, int width);

// For a terminal: "[#####.....] 42% step 420/1000 epoch 1 | 5321 samples/s |
// loss 0.4123 | eval accuracy 0.86 | ETA 1m05s"; the bar, percent and ETA
// are left out when the total is unknown. Pending jobs show their reason.
std::string TtyProgressLine(const v1::JobInfo& job, double observed_steps_per_second, int bar_width = 20);

// For logs and pipes: "RUNNING 42% step 420/1000 epoch 1 | ... | ETA 1m05s".
std::string PlainProgressLine(const v1::JobInfo& job, double observed_steps_per_second);

// "SUCCEEDED | 1000 steps | epoch 3 | final loss 0.1234 | eval accuracy 0.91"
// and "| reason: ..." when there is one.
std::string FinalSummary(const v1::JobInfo& job);

}  // namespace herd::client
