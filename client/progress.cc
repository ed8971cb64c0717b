#include "client/progress.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/control_chars.h"
#include "common/job_spec.h"
#include "client/format.h"

namespace herd::client {

void StepRateTracker::Observe(double now, int64_t step) {
  if (!samples_.empty() && step < samples_.back().second) samples_.clear();
  // Until the step moves, the window starts at the newest sighting: time spent
  // before training began (loading, rendezvous) or in a stall is no step rate.
  if (!samples_.empty() && step == samples_.front().second) samples_.clear();
  samples_.emplace_back(now, step);
  while (samples_.size() > 2 && now - samples_[1].first >= window_seconds_) samples_.pop_front();
}

double StepRateTracker::StepsPerSecond() const {
  if (samples_.size() < 2) return 0;
  double elapsed = samples_.back().first - samples_.front().first;
  if (elapsed < 1) return 0;
  return static_cast<double>(samples_.back().second - samples_.front().second) / elapsed;
}

std::optional<double> EstimateEtaSeconds(const v1::JobInfo& job, double observed_steps_per_second) {
  if (job.total_steps() <= 0) return std::nullopt;
  int64_t remaining = std::max<int64_t>(0, job.total_steps() - job.step());
  if (remaining == 0) return 0.0;
  double steps_per_second = observed_steps_per_second;
  if (steps_per_second <= 0) {
    const double samples_per_step = static_cast<double>(SamplesPerStep(job.spec(), job.world_size()));
    if (samples_per_step > 0) steps_per_second = job.samples_per_second() / samples_per_step;
  }
  if (steps_per_second <= 0 || !std::isfinite(steps_per_second)) return std::nullopt;
  return remaining / steps_per_second;
}

std::string ProgressBar(double fraction, int width) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  int filled = static_cast<int>(std::floor(fraction * width));
  return absl::StrCat("[", std::string(filled, '#'), std::string(width - filled, '.'), "]");
}

namespace {

double Fraction(const v1::JobInfo& job) {
  return std::clamp(static_cast<double>(job.step()) / job.total_steps(), 0.0, 1.0);
}

std::string Percent(const v1::JobInfo& job) { return absl::StrFormat("%.0f%%", 100 * Fraction(job)); }

// "step 420/1000 epoch 1 | 5321 samples/s | loss 0.4123 | eval ... | ETA 1m05s"
std::string Details(const v1::JobInfo& job, double observed_steps_per_second) {
  std::string text = absl::StrCat("step ", FormatStep(job), " epoch ", job.epoch());
  absl::StrAppend(&text, absl::StrFormat(" | %.0f samples/s", job.samples_per_second()));
  if (job.step() > 0) absl::StrAppend(&text, " | loss ", FormatLoss(job.loss()));
  if (!job.eval().empty()) absl::StrAppend(&text, " | eval ", FormatEval(job.eval()));
  if (job.total_steps() > 0) {
    std::optional<double> eta = EstimateEtaSeconds(job, observed_steps_per_second);
    absl::StrAppend(&text, " | ETA ", eta.has_value() ? FormatDuration(*eta) : "?");
  }
  if (std::string straggler = FormatStragglerShort(job); !straggler.empty()) absl::StrAppend(&text, " | ", straggler);
  // The coordinator cannot save the job: what this line shows may not survive
  // a coordinator restart.
  if (!job.storage_warning().empty()) absl::StrAppend(&text, " | STORAGE: ", job.storage_warning());
  // Last: it can be long (a storage error, a skipped checkpoint and why).
  if (!job.warning().empty()) absl::StrAppend(&text, " | warning: ", job.warning());
  return text;
}

std::string Pending(const v1::JobInfo& job) {
  std::string text = job.reason().empty() ? "PENDING" : absl::StrCat("PENDING: ", job.reason());
  if (!job.storage_warning().empty()) absl::StrAppend(&text, " | STORAGE: ", job.storage_warning());
  return text;
}

}  // namespace

// Reasons and eval keys come from workers and users: printed inert.
std::string TtyProgressLine(const v1::JobInfo& job, double observed_steps_per_second, int bar_width) {
  if (job.state() == v1::PENDING) return EscapeControlChars(Pending(job));
  std::string prefix;
  if (job.total_steps() > 0) prefix = absl::StrCat(ProgressBar(Fraction(job), bar_width), " ", Percent(job), " ");
  return EscapeControlChars(prefix + Details(job, observed_steps_per_second));
}

std::string PlainProgressLine(const v1::JobInfo& job, double observed_steps_per_second) {
  if (job.state() == v1::PENDING) return EscapeControlChars(Pending(job));
  std::string line = JobStateName(job.state()) + " ";
  if (job.total_steps() > 0) absl::StrAppend(&line, Percent(job), " ");
  return EscapeControlChars(line + Details(job, observed_steps_per_second));
}

std::string FinalSummary(const v1::JobInfo& job) {
  std::string text = absl::StrCat(JobStateName(job.state()), " | ", job.step(), " steps | epoch ", job.epoch());
  if (job.step() > 0) absl::StrAppend(&text, " | final loss ", FormatLoss(job.loss()));
  if (!job.eval().empty()) absl::StrAppend(&text, " | eval ", FormatEval(job.eval()));
  if (!job.reason().empty()) absl::StrAppend(&text, " | reason: ", job.reason());
  if (!job.warning().empty()) absl::StrAppend(&text, " | warning: ", job.warning());
  return EscapeControlChars(text);
}

}  // namespace herd::client
