#include "worker/train/training_step.h"

#include <glog/logging.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "worker/train/optim/optimizer_factory.h"
#include "worker/train/optim/sharded_optimizer.h"
#include "worker/train/step/autocast.h"
#include "worker/train/step/torch_errors.h"

namespace herd {

StepBoundary BoundaryAt(const v1::JobSpec& spec, const TrainingPosition& pos, int64_t last_commit_step,
                        int64_t rank_samples, int64_t step_samples, bool epoch_end) {
  StepBoundary at;
  at.rank_samples = rank_samples;
  at.step_samples = step_samples;
  at.step = pos.step;
  at.epoch_end = epoch_end;
  const int64_t eval_interval = spec.eval().interval_steps();
  at.eval_due = eval_interval > 0 && pos.step % eval_interval == 0;
  const int64_t checkpoint_interval = spec.checkpoint().interval_steps();
  at.checkpoint_due = checkpoint_interval > 0 && pos.step % checkpoint_interval == 0;
  at.done = DoneAt(pos, spec.max_steps(), spec.epochs());
  at.steps_since_commit = pos.step - last_commit_step;
  at.log_interval = spec.log_interval_steps();
  return at;
}

TrainingStep::TrainingStep(TrainingContext* context, StepSetup setup)
    : ctx_(*context), setup_(std::move(setup)), book_(ctx_.progress()), times_(MakeDeviceIntervalTimer(ctx_.device())) {}

absl::Status TrainingStep::Run(int64_t last_commit_step, bool* epoch_end) {
  TrainingPosition& pos = ctx_.position();
  const StepPlan plan = setup_.feed->Plan(pos);
  int64_t mine = 0;
  for (const auto& micro : plan.micro_batches) mine += static_cast<int64_t>(micro.size());
  // Mode average after warmup: no gradient sync, each rank steps on the
  // mean loss of its own samples, and rounds average the parameters.
  const bool local = setup_.sync->LocalStep(pos.step);
  setup_.feed->Record(pos, plan);
  times_.BeforeStep();
  StepTimer timer;  // for metrics: a few clock reads per micro-batch
  StepStats stats;
  if (auto s = Train(plan, local, &timer, &stats); !s.ok()) return s;
  // The sync measures its own wait; the rest of the update is the optimizer's.
  stats.optimizer_seconds = timer.Lap() - setup_.sync->last_step().finish_seconds;
  stats.step_seconds = timer.Total();
  times_.AfterStep(stats.step_seconds);
  ctx_.traffic().samples += mine;
  const int64_t epoch_before = pos.epoch;
  pos = AdvancedByStep(pos, plan.global_count, ctx_.train_set().size());
  *epoch_end = pos.epoch != epoch_before;
  const StepBoundary at = BoundaryAt(ctx_.spec(), pos, last_commit_step, mine, plan.global_count, *epoch_end);
  if (auto s = setup_.sync->AfterStep(local, at, &ctx_.traffic()); !s.ok()) return s;
  const double wall_seconds = timer.Total();
  ctx_.traffic().train_seconds += wall_seconds;
  // Straggler detection (straggler.h): this step's wall time (averaging
  // rounds after it included) split into the sync's wait and the rest.
  const double wait_seconds = setup_.sync->last_step().wait_seconds;
  stats.compute_seconds = std::max(0.0, wall_seconds - wait_seconds);
  book_.AddStep(plan.global_count, stats.compute_seconds, wait_seconds, pos.step != setup_.first_step);
  Observe(stats);
  return absl::OkStatus();
}

absl::Status TrainingStep::Train(const StepPlan& plan, bool local, StepTimer* timer, StepStats* stats) {
  const StepAction action = NextAction(plan);
  if (action != StepAction::kEager) {
    absl::StatusOr<bool> graphed = RunGraphed(plan, action, timer, stats);
    if (!graphed.ok()) return graphed.status();
    if (*graphed) return absl::OkStatus();
  }
  ProgressWindow step_losses;  // skip_step holds the step's losses until the step is kept
  if (ctx_.on_nonfinite() == NonFinitePolicy::kSkipStep) step_losses.Reset(ctx_.device(), step_losses.start);
  RunMicroBatches(plan, local, timer, stats, &step_losses);
  if (!setup_.replica_sum->status().ok()) return setup_.replica_sum->status();
  timer->Lap();
  return Update(local, step_losses);
}

void TrainingStep::RunMicroBatches(const StepPlan& plan, bool local, StepTimer* timer,
                                   StepStats* stats, ProgressWindow* step_losses) {
  const auto& micros = plan.micro_batches;
  int64_t covered = 0;  // the samples of the ranks the gradient sum covers
  for (int r : setup_.sync->GradientRanks(local)) {
    if (static_cast<size_t>(r) < plan.takes.size()) covered += plan.takes[static_cast<size_t>(r)];
  }
  const bool may_skip = ctx_.on_nonfinite() == NonFinitePolicy::kSkipStep;
  // Undefined rather than zero: the next backward allocates fresh gradients
  // instead of accumulating into last step's bucket views.
  for (const auto& p : ctx_.params()) p.mutable_grad() = torch::Tensor();
  for (size_t m = 0; m < micros.size(); ++m) {
    if (m + 1 == micros.size() && setup_.sync->SyncsGradients(local)) setup_.sync->ArmBackward(local);
    const auto& indices = micros[m];
    // A short last step leaves some ranks idle, unless the forward is a
    // collective: then they run it on no rows.
    if (!setup_.feed->Runs(indices)) continue;
    const Batch batch = setup_.feed->Take(indices);
    // The next step's batches are gathered while this one computes.
    if (m + 1 == micros.size()) setup_.feed->PrefetchNext(ctx_.position(), plan.global_count);
    // Scaled so that summing gradients over the ranks the sync sums them
    // over yields the mean over their samples: the global batch's, this
    // rank's own on a local step, the island's on an island's local step.
    const auto rows = static_cast<int64_t>(indices.size());
    const double share = static_cast<double>(rows) / static_cast<double>(covered);
    ForwardBackward(batch, rows, share, timer, stats, may_skip ? step_losses : &book_.window());
  }
}

torch::Tensor TrainingStep::ForwardBackward(const Batch& batch, int64_t rows, double share, StepTimer* timer,
                                            StepStats* stats, ProgressWindow* losses) {
  timer->Lap();  // loading the batch is neither forward nor backward
  std::unique_lock<std::mutex> compute;
  if (ctx_.options().compute_mutex != nullptr) compute = std::unique_lock<std::mutex>(*ctx_.options().compute_mutex);
  ModelOutput out = [&] {
    CudaBf16Autocast autocast(ctx_.spec().bf16_autocast() && ctx_.device().is_cuda());
    try {
      return ctx_.model()->Forward(batch);
    } catch (const std::exception& e) {
      RethrowForwardError(e, setup_.collective_forward);
    }
  }();
  stats->forward_seconds += timer->Lap();
  if (!out.loss.requires_grad()) {
    throw ModelContractError(
        "its loss does not require grad: no parameter has requires_grad set, or forward detaches the graph; "
        "there is nothing to train");
  }
  // A share of 1 (one rank, one micro-batch) would be two more kernels per
  // step, a multiply and its backward, for bitwise the same gradients.
  if (share == 1.0) {
    out.loss.backward();
  } else {
    (out.loss * share).backward();
  }
  stats->backward_seconds += timer->Lap();
  stats->local_samples += rows;
  if (losses == nullptr) return out.loss.detach();
  // Summed and checked on the device, read at the next report: no host sync
  // per step. (float64 += float32 * rows: promoted in the one kernel.)
  losses->loss_sum.add_(out.loss.detach(), static_cast<double>(rows));
  losses->loss_count += rows;
  if (ctx_.on_nonfinite() == NonFinitePolicy::kFail) {
    book_.window().nonfinite.Observe(out.loss, ctx_.position().step + 1, NonFiniteWatch::kLoss);
  }
  return out.loss.detach();
}

void TrainingStep::SetStepLearningRate() {
  book_.set_learning_rate(LearningRateAt(ctx_.spec().schedule(), setup_.lr_plan, ctx_.position().step,
                                         std::max<int64_t>(1, setup_.total_steps)));
  SetLearningRate(ctx_.optimizer(), book_.learning_rate());
}

absl::Status TrainingStep::Update(bool local, const ProgressWindow& step_losses) {
  const int64_t step = ctx_.position().step;
  SetStepLearningRate();
  const bool may_skip = ctx_.on_nonfinite() == NonFinitePolicy::kSkipStep;
  const UpdateInputs update{ctx_.optimizer(), ctx_.spec().grad_clip_norm(), step, may_skip, step_losses.loss_sum,
                            &ctx_.host_reads()};
  if (auto s = setup_.sync->Update(local, update); !s.ok()) return s;
  const SyncStepCost& cost = setup_.sync->last_step();
  book_.KeepOrDropStep(step_losses, cost.skipped, cost.grad_norm, step + 1);
  return absl::OkStatus();
}

void TrainingStep::Observe(StepStats stats) const {
  TrainerMetrics* metrics = ctx_.metrics();
  if (metrics == nullptr) return;
  const SyncStepCost& sync = setup_.sync->last_step();
  stats.allreduce_wait_seconds = sync.wait_seconds;
  stats.allreduce_bytes = sync.wire_bytes;
  stats.buckets_launched_during_backward = sync.launched_during_backward;
  stats.optimizer_state_bytes = OptimizerStateBytes(*ctx_.optimizer());
  stats.step = ctx_.position().step;
  stats.epoch = ctx_.position().epoch;
  metrics->ObserveStep(stats);
  metrics->ObserveSyncTraffic(ctx_.traffic());
}

StepAction TrainingStep::NextAction(const StepPlan& plan) {
  if (setup_.capture == nullptr || !setup_.capture->active()) return StepAction::kEager;
  const TrainingPosition& pos = ctx_.position();
  StepEvent event;
  event.generation = setup_.generation;
  event.plan = setup_.feed->plan_version();
  // Only a step of one micro-batch is captured (CaptureEnvironment rules
  // the others out); no rows keeps any other step eager.
  event.rows = plan.micro_batches.size() == 1 ? static_cast<int64_t>(plan.micro_batches.front().size()) : 0;
  event.epoch_last = AdvancedByStep(pos, plan.global_count, ctx_.train_set().size()).epoch != pos.epoch;
  const StepCaptureDecision decision = setup_.capture->Next(event);
  if (decision.action == StepAction::kCapture) {
    LOG(INFO) << "step " << pos.step + 1 << ": cuda_graphs: capturing the step as a CUDA graph ("
              << CaptureCauseLabel(decision.cause) << ", " << event.rows << " rows)";
  }
  return decision.action;
}

absl::StatusOr<bool> TrainingStep::RunGraphed(const StepPlan& plan, StepAction action, StepTimer* timer,
                                              StepStats* stats) {
  if (graph_ == nullptr) {
    auto graph = GraphedStep::Create(ctx_.device(), ctx_.params());
    if (!graph.ok()) {
      setup_.capture->CaptureFailed(graph.status().ToString());
      return false;
    }
    graph_ = *std::move(graph);
  }
  // DecideStep asks for a graph only on a step of one micro-batch (rows > 0), but a re-plan may ask on any.
  if (plan.micro_batches.size() != 1 || plan.micro_batches.front().empty()) return false;
  const std::vector<int64_t>& indices = plan.micro_batches.front();
  const auto rows = static_cast<int64_t>(indices.size());
  const Batch batch = setup_.feed->TakeOnHost(indices);  // pinned: the graph's inputs are filled from it
  setup_.feed->PrefetchNext(ctx_.position(), plan.global_count);
  SetStepLearningRate();  // on the host too: checkpoints and eager steps read it there
  timer->Lap();
  if (action == StepAction::kCapture) {
    setup_.sync->BeforeCapture(*ctx_.optimizer());
    const absl::Status s = graph_->Capture(batch, book_.learning_rate(), *ctx_.optimizer(),
                                           [&](const Batch& in, const torch::Tensor& lr) { return GraphBody(in, rows, lr); });
    if (!s.ok()) {
      setup_.capture->CaptureFailed(s.ToString());
      return false;
    }
  } else {
    std::unique_lock<std::mutex> compute;
    if (ctx_.options().compute_mutex != nullptr) compute = std::unique_lock<std::mutex>(*ctx_.options().compute_mutex);
    if (auto s = graph_->Replay(batch, book_.learning_rate(), *ctx_.optimizer()); !s.ok()) return s;
  }
  stats->forward_seconds += timer->Lap();  // the whole graph: its parts are not timed apart
  stats->local_samples += rows;
  AccountGraphed(rows);
  return true;
}

GraphedOutputs TrainingStep::GraphBody(const Batch& batch, int64_t rows, const torch::Tensor& lr) {
  StepTimer timer;  // the capture's clock reads: not the step's time
  StepStats unused;
  // One rank, one micro-batch: the gradient is this batch's mean (share 1).
  if (setup_.sync->SyncsGradients(/*local=*/false)) setup_.sync->ArmBackward(/*local=*/false);
  const torch::Tensor loss = ForwardBackward(batch, rows, 1.0, &timer, &unused, nullptr);
  UpdateInputs update;
  update.optimizer = ctx_.optimizer();
  update.grad_clip_norm = ctx_.spec().grad_clip_norm();
  update.step = ctx_.position().step;
  update.host_reads = &ctx_.host_reads();
  update.device_lr = lr;
  if (auto s = setup_.sync->Update(/*local=*/false, update); !s.ok()) throw std::runtime_error(std::string(s.message()));
  return {loss, setup_.sync->last_step().grad_norm};
}

void TrainingStep::AccountGraphed(int64_t rows) {
  const GraphedOutputs& out = graph_->outputs();
  const int64_t step = ctx_.position().step;
  ProgressWindow& window = book_.window();
  window.loss_sum.add_(out.loss, static_cast<double>(rows));
  window.loss_count += rows;
  if (ctx_.on_nonfinite() == NonFinitePolicy::kFail) window.nonfinite.Observe(out.loss, step + 1, NonFiniteWatch::kLoss);
  book_.KeepOrDropStep(ProgressWindow(), /*skipped=*/false, out.grad_norm, step + 1);
}

}  // namespace herd
