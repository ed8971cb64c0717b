// What the next progress report says, kept between commit points: the
// window of steps since the last one (loss summed on the device, samples,
// step times), the learning rate and evaluation metrics to report, the last
// report posted and the warnings that are not the checkpoints' or the
// sync's (steps skipped under on_nonfinite: skip_step). The step loop adds
// to it; a commit point closes the window (its one host read) and turns it
// into a report.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/herd.pb.h"
#include "worker/train/step/training_position.h"
#include "worker/train/report/nonfinite_watch.h"
#include "worker/train/report/step_time_window.h"
#include "worker/train/report/straggler.h"
#include "worker/train/report/trainer_metrics.h"
#include "worker/train/step/host_reads.h"
#include "worker/train/sync/sync_traffic.h"

namespace herd {

// Since the last commit point: what the next progress report averages.
// Accumulated on the model's device, read only when a report is made
// (host_reads.h): the step loop never waits for the device.
struct ProgressWindow {
  // Restarts the window on `device` at `now`.
  void Reset(const torch::Device& device, std::chrono::steady_clock::time_point now);

  torch::Tensor loss_sum;  // float64 on the device: sum over samples of the loss
  int64_t loss_count = 0;  // samples in loss_sum
  NonFiniteWatch nonfinite;  // on_nonfinite: fail
  int64_t samples = 0;     // global samples trained in the window
  // This rank's step time in the window, split for straggler detection
  // (straggler.h): wait = the sync's wait to finish the gradient all-reduce,
  // compute = the rest of each step's wall time. Host clocks only.
  double compute_seconds = 0;
  double wait_seconds = 0;
  int64_t steps = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

// What a commit point knows beside the book: where training is and what
// the ranks measured.
struct CommitFacts {
  std::string job_id;
  int64_t generation = 0;
  int64_t rank = 0;
  TrainingPosition position;
  int64_t total_steps = 0;
  bool final = false;
  SyncStatus sync;
  // The checkpoint keeper's: a failed write, a checkpoint skipped at restore.
  std::string checkpoint_warning;
  // Rank 0, 2+ ranks: the interval's straggler and every rank's times, the
  // shares the interval ran on and those planned for the next.
  std::optional<StragglerSummary> straggler;
  std::vector<RankStepTimes> rank_times;
  std::vector<int64_t> interval_shares;
  std::vector<int64_t> shares;
  std::vector<v1::ModelFile> final_model;
};

class ProgressBook {
 public:
  // `metrics` may be null and must outlive the book.
  ProgressBook(torch::Device device, NonFinitePolicy on_nonfinite, TrainerMetrics* metrics);

  // Where the step loop adds each micro-batch's loss (and, under
  // on_nonfinite: fail, checks it).
  ProgressWindow& window() { return window_; }
  // A generation's start: the step times of steps rolled back are no
  // measure of it.
  void ForgetStepTimes();
  // A step done: its global samples, and its compute and wait time unless
  // it is no measure of a rank's speed (a generation's first step).
  void AddStep(int64_t global_samples, double compute_seconds, double wait_seconds, bool timed);
  // After the update (sync's verdict in `skipped`, the gradient norm in
  // `grad_norm`): the step's losses join the window unless the ranks dropped
  // it (skip_step: counted and warned); under fail the norm is watched.
  void KeepOrDropStep(const ProgressWindow& step_losses, bool skipped, const torch::Tensor& grad_norm, int64_t step);

  void set_learning_rate(double rate) { learning_rate_ = rate; }
  double learning_rate() const { return learning_rate_; }
  // An evaluation's metrics, reported until the next; rank 0 logs them.
  void SetEval(std::map<std::string, double> metrics, int64_t rank, const TrainingPosition& at);
  const std::map<std::string, double>& eval() const { return eval_; }

  // At a commit point: the report's loss and throughput from the window
  // (its one host read) and a new window. INVALID_ARGUMENT when on_nonfinite:
  // fail saw a non-finite loss or gradient norm since the last one.
  absl::Status CloseWindow(bool final, HostReads* host_reads, const SyncTraffic& traffic);
  // The report of a commit point (after CloseWindow); rank 0 logs its line.
  // Kept as the last report: what a successful exit leaves as final.
  v1::ReportProgressRequest MakeReport(const CommitFacts& facts);
  const v1::ReportProgressRequest& last_report() const { return last_report_; }
  // At a commit point: the interval's host and device time per step, as
  // metrics and (rank 0) a log line.
  void ObserveStepTimes(const std::optional<StepTimes>& times, int64_t rank, int64_t step) const;

 private:
  // The report's `warning`: the checkpoints', the non-finite watch's and the
  // sync's, in that order.
  std::string Warning(const CommitFacts& facts) const;

  const torch::Device device_;
  const NonFinitePolicy on_nonfinite_;
  TrainerMetrics* const metrics_;
  ProgressWindow window_;
  int64_t global_samples_ = 0;  // samples of the whole job trained by steps this process took part in
  double last_loss_ = 0;
  double learning_rate_ = 0;  // of the last step
  double samples_per_second_ = 0;
  std::map<std::string, double> eval_;
  v1::ReportProgressRequest last_report_;
  int64_t nonfinite_steps_skipped_ = 0;
  std::string nonfinite_warning_;
};

}  // namespace herd
