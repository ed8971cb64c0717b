#include "worker/train/report/progress_book.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace herd {
namespace {

void AddStraggler(const CommitFacts& facts, v1::ReportProgressRequest* report) {
  const StragglerSummary& straggler = *facts.straggler;
  v1::Straggler* out = report->mutable_straggler();
  out->set_rank(straggler.rank);
  out->set_compute_seconds_per_step(straggler.compute_seconds_per_step);
  out->set_median_compute_seconds_per_step(straggler.median_compute_seconds_per_step);
  out->set_others_wait_seconds_per_step(straggler.others_wait_seconds_per_step);
  out->set_step_seconds(straggler.step_seconds);
  out->set_holdback_fraction(straggler.holdback_fraction);
  out->set_step(facts.position.step);
  // Every rank beside it (FindStraggler found the times valid).
  for (size_t rank = 0; rank < facts.rank_times.size(); ++rank) {
    const RankStepTimes& times = facts.rank_times[rank];
    const double steps = times.steps > 0 ? static_cast<double>(times.steps) : 1.0;
    v1::RankInterval* interval = report->add_ranks();
    interval->set_compute_seconds_per_step(times.compute_seconds / steps);
    interval->set_wait_seconds_per_step(times.wait_seconds / steps);
    interval->set_samples_per_step(facts.interval_shares[rank]);
    interval->set_batch_share(facts.shares[rank]);
  }
}

}  // namespace

void ProgressWindow::Reset(const torch::Device& device, std::chrono::steady_clock::time_point now) {
  loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  loss_count = 0;
  nonfinite.Reset(device);
  samples = 0;
  compute_seconds = 0;
  wait_seconds = 0;
  steps = 0;
  start = now;
}

ProgressBook::ProgressBook(torch::Device device, NonFinitePolicy on_nonfinite, TrainerMetrics* metrics)
    : device_(device), on_nonfinite_(on_nonfinite), metrics_(metrics) {
  window_.Reset(device_, std::chrono::steady_clock::now());
}

void ProgressBook::ForgetStepTimes() {
  window_.compute_seconds = 0;
  window_.wait_seconds = 0;
  window_.steps = 0;
}

void ProgressBook::AddStep(int64_t global_samples, double compute_seconds, double wait_seconds, bool timed) {
  window_.samples += global_samples;
  global_samples_ += global_samples;
  if (!timed) return;
  window_.compute_seconds += compute_seconds;
  window_.wait_seconds += wait_seconds;
  ++window_.steps;
}

void ProgressBook::KeepOrDropStep(const ProgressWindow& step_losses, bool skipped, const torch::Tensor& grad_norm,
                                  int64_t step) {
  if (on_nonfinite_ == NonFinitePolicy::kFail) {
    if (grad_norm.defined()) window_.nonfinite.Observe(grad_norm, step, NonFiniteWatch::kGradientNorm);
    return;
  }
  if (!skipped) {
    window_.loss_sum.add_(step_losses.loss_sum);
    window_.loss_count += step_losses.loss_count;
    return;
  }
  // Every rank saw the same flag: every rank drops this step.
  ++nonfinite_steps_skipped_;
  if (metrics_ != nullptr) metrics_->ObserveNonFiniteSkip();
  LOG(WARNING) << "step " << step
               << " skipped: a loss or gradient was NaN or infinite on some rank (on_nonfinite: skip_step)";
  nonfinite_warning_ = absl::StrCat(nonfinite_steps_skipped_, nonfinite_steps_skipped_ == 1 ? " step" : " steps",
                                    " skipped for a NaN or infinite loss or gradient (on_nonfinite: skip_step), "
                                    "the last at step ", step);
}

void ProgressBook::SetEval(std::map<std::string, double> metrics, int64_t rank, const TrainingPosition& at) {
  eval_ = std::move(metrics);
  if (metrics_ != nullptr) metrics_->SetEval(eval_);
  if (rank != 0) return;
  std::string line = absl::StrFormat("eval at step %d (epoch %d):", at.step, at.epoch);
  for (const auto& [name, value] : eval_) absl::StrAppendFormat(&line, " %s %.4f", name, value);
  LOG(INFO) << line;
}

void ProgressBook::ObserveStepTimes(const std::optional<StepTimes>& times, int64_t rank, int64_t step) const {
  if (!times.has_value()) return;
  const double device = times->device_seconds_per_step.value_or(-1);
  if (metrics_ != nullptr) metrics_->SetStepTimes(times->host_seconds_per_step, device);
  if (rank != 0) return;
  LOG(INFO) << absl::StrFormat("step %d: host %.3f ms/step", step, times->host_seconds_per_step * 1e3)
            << (device >= 0 ? absl::StrFormat(", gpu %.3f ms/step", device * 1e3) : std::string())
            << " over the last " << times->steps << " steps";
}

absl::Status ProgressBook::CloseWindow(bool final, HostReads* host_reads, const SyncTraffic& traffic) {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - window_.start).count();
  if (final) {
    // A finished job reports its training throughput, not that of its
    // last interval (which includes the final evaluation).
    if (traffic.train_seconds > 0) samples_per_second_ = static_cast<double>(global_samples_) / traffic.train_seconds;
  } else if (window_.samples > 0 && seconds > 0) {
    samples_per_second_ = static_cast<double>(window_.samples) / seconds;
  }
  // The window's one host read: its loss and (on_nonfinite: fail) the
  // first non-finite value of its steps.
  if (window_.loss_count > 0) {
    std::vector<torch::Tensor> values = window_.nonfinite.Tensors();
    values.push_back(window_.loss_sum);
    const std::vector<double> read = host_reads->Read(values);
    if (auto s = NonFiniteWatch::Verdict(read[0], read[1], read[2]); !s.ok()) return s;
    last_loss_ = read[3] / static_cast<double>(window_.loss_count);
  }
  if (metrics_ != nullptr) metrics_->SetLoss(last_loss_);
  window_.Reset(device_, now);
  return absl::OkStatus();
}

std::string ProgressBook::Warning(const CommitFacts& facts) const {
  std::vector<std::string> warnings;
  for (const std::string* w : {&facts.checkpoint_warning, &nonfinite_warning_, &facts.sync.warning}) {
    if (!w->empty()) warnings.push_back(*w);
  }
  return absl::StrJoin(warnings, "; ");
}

v1::ReportProgressRequest ProgressBook::MakeReport(const CommitFacts& facts) {
  v1::ReportProgressRequest report;
  report.set_job_id(facts.job_id);
  report.set_generation(facts.generation);
  report.set_rank(facts.rank);
  report.set_step(facts.position.step);
  report.set_epoch(facts.position.epoch);
  report.set_samples_in_epoch(facts.position.samples_in_epoch);
  report.set_samples_per_second(samples_per_second_);
  report.set_loss(last_loss_);
  report.set_total_steps(facts.total_steps);
  report.set_warning(Warning(facts));
  report.set_learning_rate(learning_rate_);
  if (metrics_ != nullptr) {
    metrics_->SetOverlapSteps(facts.sync.overlap_steps);
    if (!facts.sync.round_shape.empty()) metrics_->SetGatherRounds(facts.sync.round_shape == "gather");
  }
  if (facts.rank == 0 && (facts.sync.overlap_steps > 0 || !facts.sync.round_shape.empty())) {
    v1::SyncState* state = report.mutable_sync_state();
    state->set_overlap_steps(facts.sync.overlap_steps);
    state->set_overlap_auto(facts.sync.overlap_auto);
    state->set_round_seconds(facts.sync.round_seconds);
    state->set_step_seconds(facts.sync.step_seconds);
    state->set_round_shape(facts.sync.round_shape);
  }
  for (const auto& [name, value] : eval_) (*report.mutable_eval())[name] = value;
  if (facts.final) {
    for (const v1::ModelFile& file : facts.final_model) *report.add_final_model() = file;
  }
  if (facts.rank == 0) {
    LOG(INFO) << absl::StrFormat("step %d/%d epoch %d loss %.4f %.0f samples/s%s", facts.position.step,
                                 facts.total_steps, facts.position.epoch, last_loss_, samples_per_second_,
                                 facts.final ? " (final)" : "");
    if (facts.straggler.has_value()) {
      AddStraggler(facts, &report);
      if (metrics_ != nullptr) metrics_->SetStraggler(facts.straggler->rank, facts.straggler->holdback_fraction);
    }
  }
  last_report_ = report;
  return report;
}

}  // namespace herd
