#include "worker/train/trainer.h"

#include <glog/logging.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "worker/train/checkpoint/final_model.h"
#include "worker/train/generation/liveness.h"
#include "worker/train/optim/optimizer_factory.h"
#include "worker/train/optim/sharded_optimizer.h"
#include "worker/train/report/straggler.h"
#include "worker/train/step/autocast.h"
#include "worker/train/step/evaluator.h"
#include "worker/train/step/torch_errors.h"
#include "worker/train/sync/replicas.h"

namespace herd {
namespace {

// cuda_graphs: eager steps before a generation's capture (cuDNN/cuBLAS
// autotuning, the allocator's pools and NCCL's buffers settle in them).
constexpr int64_t kCaptureWarmupSteps = 3;

int64_t ParameterBytes(const std::vector<torch::Tensor>& params) {
  int64_t bytes = 0;
  for (const auto& p : params) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Trainer::Trainer(CoordinatorLink* client, TrainingContext* context, v1::JoinGenerationResponse join,
                 CommunicatorFactory communicators)
    : client_(client),
      ctx_(*context),
      join_(std::move(join)),
      spec_(ctx_.spec()),
      pos_(ctx_.position()),
      book_(ctx_.progress()),
      make_communicators_(std::move(communicators)),
      step_capture_(
          spec_.cuda_graphs(), kCaptureWarmupSteps,
          [this](const char* reason) {
            if (ctx_.metrics() != nullptr) ctx_.metrics()->ObserveCudaGraphFallback(reason);
          },
          [](const std::string& line) { LOG(WARNING) << line; }),
      step_times_(MakeDeviceIntervalTimer(ctx_.device())) {}

Trainer::~Trainer() {
  // The sum goes with this generation's communicators.
  if (replica_sum_ != nullptr) ctx_.model()->SetReplicaSum(nullptr);
}

GenerationEnd Trainer::Run() {
  absl::Status status = TrainGeneration();
  if (status.ok() && boundary_.has_value()) return *boundary_;
  return GenerationEnd::Of(std::move(status));
}

absl::Status Trainer::TrainGeneration() {
  try {
    if (auto s = Setup(); !s.ok()) return s;
    const int64_t eval_interval = spec_.eval().interval_steps();
    const int64_t first_step = pos_.step + 1;
    while (!Done()) {
      MarkAlive();
      if (auto s = manager_->Verdict(); !s.ok()) return s;
      running_step_ = pos_.step + 1;
      if (auto s = TrainStep(); !s.ok()) return s;
      running_step_ = 0;
      // With the "step N/T" line of the last step, this line's time bounds
      // the wall time of training as a user sees it (bench/wan_bench.py).
      if (pos_.step == first_step) LOG(INFO) << "step " << pos_.step << ": the generation's first step is done";
      if (eval_interval > 0 && pos_.step % eval_interval == 0 && pos_.samples_in_epoch != 0) {
        if (auto s = RunEval(); !s.ok()) return s;
      }
      // The last step is a commit point too, so its report (and log line)
      // marks the end of training before the final evaluation starts.
      if (sync_->CommitDue(Boundary(), last_commit_step_, spec_.log_interval_steps())) {
        if (auto s = CommitPoint(false); !s.ok() || boundary_.has_value()) return s;
      }
    }
    return Finish();
  } catch (const std::exception& e) {
    // Out of memory fails the job at once (RESOURCE_EXHAUSTED), naming the step.
    return TrainingError(e, {absl::StrCat("training step ", step_reached()), ctx_.model()->name(),
                             ctx_.device().str(), spec_.batch_size(), ParameterBytes(ctx_.params())});
  }
}

absl::Status Trainer::Setup() {
  const auto start = std::chrono::steady_clock::now();
  MarkAlive();
  if (auto s = ConnectGroup(); !s.ok()) return s;
  manager_ = std::make_unique<GenerationManager>(&ctx_, &join_, comm_, sync_.get());
  // The step times of steps rolled back are no measure of this generation.
  book_.ForgetStepTimes();
  if (auto s = manager_->Start(); !s.ok()) return s;
  last_commit_step_ = pos_.step;
  if (ctx_.ledger() != nullptr) {
    ctx_.ledger()->GenerationStart(join_.generation(), pos_.step, pos_.epoch, pos_.samples_in_epoch);
  }
  PlanGeneration(SecondsSince(start));
  step_capture_.StartGeneration(CaptureEnvironmentNow(), join_.generation());
  return absl::OkStatus();
}

absl::Status Trainer::ConnectGroup() {
  auto group = make_communicators_(join_, ctx_, client_);
  if (!group.ok()) return group.status();
  group_ = std::move(*group);
  comm_ = group_.control.get();
  replica_sum_ = std::make_unique<CommunicatorReplicaSum>(group_.data, ctx_.options().compute_mutex);
  collective_forward_ = ctx_.model()->SetReplicaSum(replica_sum_.get());
  auto sync = CreateSyncStrategy(ctx_.sync(), ctx_.params(), group_.data);
  if (!sync.ok()) return sync.status();
  sync_ = std::move(*sync);
  LOG(INFO) << sync_->Describe();
  return absl::OkStatus();
}

void Trainer::PlanGeneration(double setup_seconds) {
  const int64_t per_step = SamplesPerStep(spec_, join_.world_size());
  const int64_t epoch_size = ctx_.train_set().size();
  // Every generation starts from equal shares: its members' rates are not
  // known yet, and a fixed start keeps sync.shares equal reproducible.
  shares_ = EqualShares(per_step, static_cast<int>(join_.world_size()));
  share_history_ = {};
  first_step_ = pos_.step + 1;
  if (ctx_.metrics() != nullptr) ctx_.metrics()->SetBatchShare(shares_[join_.rank()]);
  total_steps_ = LastStepFrom(pos_, epoch_size, per_step, spec_.epochs(), spec_.max_steps());
  // optimizer.scale_lr follows this generation's world size.
  lr_plan_ = PlanLearningRate(spec_.optimizer(), join_.world_size());
  if (ctx_.metrics() != nullptr) {
    ctx_.metrics()->SetMembership(join_.world_size(), join_.generation());
    ctx_.metrics()->ObserveReform(setup_seconds);
  }
  LOG(INFO) << "rank " << join_.rank() << "/" << join_.world_size() << " generation " << join_.generation()
            << " ready in " << absl::StrFormat("%.3f", setup_seconds) << " s (no reload): "
            << lr_plan_.Describe(spec_.optimizer(), join_.world_size()) << ", "
            << (epoch_size + per_step - 1) / per_step << " steps per epoch, " << sync_->BucketSummary() << " over "
            << group_.data->backend();
}

absl::Status Trainer::Finish() {
  if (book_.eval().empty() || pos_.samples_in_epoch != 0) {
    if (auto s = RunEval(); !s.ok()) return s;
  }
  // model-final.pt holds the buffers too: the same on every rank.
  if (auto s = AgreeOnBuffers(); !s.ok()) return s;
  if (auto s = VerifyReplicasBitwise(comm_, ctx_.params()); !s.ok()) return s;
  LOG(INFO) << "replicas verified bitwise across " << join_.world_size() << " ranks (all-gather of all parameters)";
  LOG(INFO) << sync_->TrafficSummary(ctx_.traffic());
  if (auto s = SaveFinalModel(); !s.ok()) return s;
  return CommitPoint(true);
}

absl::Status Trainer::TrainStep() {
  // Micro-batches of at most batch_size, as many as this rank's share needs.
  const StepPlan plan = ctx_.sampler().PlanStep(pos_.epoch, pos_.samples_in_epoch, shares_,
                                                static_cast<int>(join_.rank()), spec_.batch_size());
  int64_t mine = 0;
  for (const auto& micro : plan.micro_batches) mine += static_cast<int64_t>(micro.size());
  // Mode average after warmup: no gradient sync, each rank steps on the
  // mean loss of its own samples, and rounds average the parameters.
  const bool local = sync_->LocalStep(pos_.step);
  RecordInLedger(plan.micro_batches);
  step_times_.BeforeStep();
  StepTimer timer;  // for metrics: a few clock reads per micro-batch
  StepStats stats;
  ProgressWindow step_losses;  // skip_step holds the step's losses until the step is kept
  if (ctx_.on_nonfinite() == NonFinitePolicy::kSkipStep) step_losses.Reset(ctx_.device(), step_losses.start);
  RunMicroBatches(plan, local, mine, &timer, &stats, &step_losses);
  if (!replica_sum_->status().ok()) return replica_sum_->status();
  timer.Lap();
  if (auto s = Update(local, step_losses); !s.ok()) return s;
  // The sync measures its own wait; the rest of the update is the optimizer's.
  stats.optimizer_seconds = timer.Lap() - sync_->last_step().finish_seconds;
  stats.step_seconds = timer.Total();
  step_times_.AfterStep(stats.step_seconds);
  ctx_.traffic().samples += mine;
  const int64_t epoch_before = pos_.epoch;
  pos_ = AdvancedByStep(pos_, plan.global_count, ctx_.train_set().size());
  const bool epoch_end = pos_.epoch != epoch_before;
  if (auto s = sync_->AfterStep(local, Boundary(mine, plan.global_count, epoch_end), &ctx_.traffic()); !s.ok()) return s;
  const double wall_seconds = timer.Total();
  ctx_.traffic().train_seconds += wall_seconds;
  // Straggler detection (straggler.h): this step's wall time (averaging
  // rounds after it included) split into the sync's wait and the rest.
  const double wait_seconds = sync_->last_step().wait_seconds;
  stats.compute_seconds = std::max(0.0, wall_seconds - wait_seconds);
  book_.AddStep(plan.global_count, stats.compute_seconds, wait_seconds, pos_.step != first_step_);
  if (epoch_end) {
    if (auto s = RunEval(); !s.ok()) return s;
  }
  ObserveStep(stats);
  return absl::OkStatus();
}

void Trainer::RunMicroBatches(const StepPlan& plan, bool local, int64_t mine, StepTimer* timer, StepStats* stats,
                              ProgressWindow* step_losses) {
  const auto& micros = plan.micro_batches;
  const bool may_skip = ctx_.on_nonfinite() == NonFinitePolicy::kSkipStep;
  // Undefined rather than zero: the next backward allocates fresh gradients
  // instead of accumulating into last step's bucket views.
  for (const auto& p : ctx_.params()) p.mutable_grad() = torch::Tensor();
  for (size_t m = 0; m < micros.size(); ++m) {
    if (m + 1 == micros.size() && !local) sync_->ArmBackward();
    const auto& indices = micros[m];
    // A short last step leaves some ranks idle, unless the forward is a
    // collective: then they run it on no rows.
    if (indices.empty() && !collective_forward_) continue;
    const Batch batch = TakeBatch(indices);
    // The next step's batches are gathered while this one computes.
    if (m + 1 == micros.size()) PrefetchNextStep(plan.global_count);
    // Scaled so that summing gradients over ranks yields the global-batch
    // mean; a local step takes the mean over this rank's samples instead.
    const auto rows = static_cast<int64_t>(indices.size());
    const double share = static_cast<double>(rows) / static_cast<double>(local ? mine : plan.global_count);
    ForwardBackward(batch, rows, share, timer, stats, may_skip ? step_losses : &book_.window());
  }
}

void Trainer::ForwardBackward(const Batch& batch, int64_t rows, double share, StepTimer* timer, StepStats* stats,
                              ProgressWindow* losses) {
  timer->Lap();  // loading the batch is neither forward nor backward
  std::unique_lock<std::mutex> compute;
  if (ctx_.options().compute_mutex != nullptr) compute = std::unique_lock<std::mutex>(*ctx_.options().compute_mutex);
  ModelOutput out = [&] {
    CudaBf16Autocast autocast(spec_.bf16_autocast() && ctx_.device().is_cuda());
    try {
      return ctx_.model()->Forward(batch);
    } catch (const std::exception& e) {
      RethrowForwardError(e, collective_forward_);
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
  // Summed and checked on the device, read at the next report: no host sync
  // per step. (float64 += float32 * rows: promoted in the one kernel.)
  losses->loss_sum.add_(out.loss.detach(), static_cast<double>(rows));
  losses->loss_count += rows;
  if (ctx_.on_nonfinite() == NonFinitePolicy::kFail) {
    book_.window().nonfinite.Observe(out.loss, pos_.step + 1, NonFiniteWatch::kLoss);
  }
}

absl::Status Trainer::Update(bool local, const ProgressWindow& step_losses) {
  book_.set_learning_rate(LearningRateAt(spec_.schedule(), lr_plan_, pos_.step, std::max<int64_t>(1, total_steps_)));
  SetLearningRate(ctx_.optimizer(), book_.learning_rate());
  const bool may_skip = ctx_.on_nonfinite() == NonFinitePolicy::kSkipStep;
  const UpdateInputs update{ctx_.optimizer(), spec_.grad_clip_norm(), pos_.step, may_skip, step_losses.loss_sum,
                            &ctx_.host_reads()};
  if (auto s = sync_->Update(local, update); !s.ok()) return s;
  const SyncStepCost& cost = sync_->last_step();
  book_.KeepOrDropStep(step_losses, cost.skipped, cost.grad_norm, pos_.step + 1);
  return absl::OkStatus();
}

Batch Trainer::TakeBatch(const std::vector<int64_t>& indices) {
  Batch batch = ctx_.prefetcher() != nullptr ? ctx_.prefetcher()->Take(indices) : ctx_.train_set().Get(indices);
  if (ctx_.device().is_cuda()) {
    // Pinned host memory (the prefetcher's already is) lets the copy run
    // asynchronously to the GPU, on the step's stream.
    batch.inputs = batch.inputs.pin_memory().to(ctx_.device(), /*non_blocking=*/true);
    batch.targets = batch.targets.pin_memory().to(ctx_.device(), /*non_blocking=*/true);
  }
  return batch;
}

void Trainer::PrefetchNextStep(int64_t step_samples) {
  if (ctx_.prefetcher() == nullptr) return;
  // Where this step leaves training (TrainStep advances by the same rule),
  // unless a commit point changes the plan: then the prefetched batches are a miss.
  const TrainingPosition after = AdvancedByStep(pos_, step_samples, ctx_.train_set().size());
  if (DoneAt(after, spec_.max_steps(), spec_.epochs())) return;
  StepPlan next = ctx_.sampler().PlanStep(after.epoch, after.samples_in_epoch, shares_,
                                          static_cast<int>(join_.rank()), spec_.batch_size());
  // Only what TrainStep will take: it skips empty micro-batches unless the forward is a collective.
  std::vector<std::vector<int64_t>> taken;
  for (auto& micro : next.micro_batches) {
    if (!micro.empty() || collective_forward_) taken.push_back(std::move(micro));
  }
  ctx_.prefetcher()->Prefetch(taken);
}

void Trainer::RecordInLedger(const std::vector<std::vector<int64_t>>& micro_batches) {
  if (ctx_.ledger() == nullptr) return;
  std::vector<int64_t> ids;
  for (const auto& micro : micro_batches) ids.insert(ids.end(), micro.begin(), micro.end());
  ctx_.ledger()->Step(join_.generation(), pos_.step, pos_.epoch, ids);
}

void Trainer::ObserveStep(StepStats stats) const {
  if (ctx_.metrics() == nullptr) return;
  const SyncStepCost& sync = sync_->last_step();
  stats.allreduce_wait_seconds = sync.wait_seconds;
  stats.allreduce_bytes = sync.wire_bytes;
  stats.buckets_launched_during_backward = sync.launched_during_backward;
  stats.optimizer_state_bytes = OptimizerStateBytes(*ctx_.optimizer());
  stats.step = pos_.step;
  stats.epoch = pos_.epoch;
  ctx_.metrics()->ObserveStep(stats);
  ctx_.metrics()->ObserveSyncTraffic(ctx_.traffic());
}

absl::Status Trainer::CommitPoint(bool final) {
  // First, so the device's stop event follows the interval's last step, not the commit's own work.
  ReportStepTimes();
  if (auto s = AgreeOnBuffers(); !s.ok()) return s;
  CommitFacts facts;
  if (auto s = AgreeAtCommit(&facts); !s.ok()) return s;
  last_commit_step_ = pos_.step;
  if (auto s = manager_->Commit(final); !s.ok()) return s;
  if (auto s = book_.CloseWindow(final, &ctx_.host_reads(), ctx_.traffic()); !s.ok()) return s;
  facts.job_id = ctx_.options().job_id;
  facts.generation = join_.generation();
  facts.rank = join_.rank();
  facts.position = pos_;
  facts.total_steps = total_steps_;
  facts.final = final;
  facts.sync = sync_->Status();
  facts.checkpoint_warning = ctx_.checkpoints().Warning();
  facts.shares = shares_;
  if (final) facts.final_model = final_model_files_;
  v1::ReportProgressRequest report = book_.MakeReport(facts);
  // Sent off the step loop: a slow or stalled coordinator never holds training up.
  if (ctx_.reporter() != nullptr) ctx_.reporter()->PostProgress(std::move(report));
  // The job's last commit point needs no vote: training ends there anyway.
  // A trainer that cannot be asked to leave takes no vote: every rank of a
  // job runs the same herd-trainer, which always can (trainer_main), so the
  // ranks agree; in-process tests without it keep their collective sequence.
  if (!final && !Done() && ctx_.options().leave_request) {
    auto end = manager_->Vote();
    if (!end.ok()) return end.status();
    boundary_ = *end;
    if (boundary_.has_value()) return absl::OkStatus();
  }
  return manager_->Verdict();
}

absl::Status Trainer::AgreeAtCommit(CommitFacts* facts) {
  // Replicas must agree at every commit point; a mismatch fails loudly. The
  // same all-gather carries each rank's step times of the log interval for
  // straggler detection and throughput shares: no extra collective.
  const ProgressWindow& window = book_.window();
  auto times = manager_->Agree(ReplicaState(), {window.compute_seconds, window.wait_seconds, window.steps});
  if (!times.ok()) return times.status();
  if (times->empty()) return absl::OkStatus();
  facts->straggler = FindStraggler(*times);
  if (join_.rank() == 0) {
    LOG(INFO) << "step " << pos_.step << ": compute/wait per step and samples per step of each rank since the "
              << "last commit: " << DescribeStepTimes(*times, shares_);
  }
  facts->interval_shares = shares_;  // the shares the interval ran on
  ReplanShares(*times);
  facts->rank_times = *std::move(times);
  return absl::OkStatus();
}

void Trainer::ReplanShares(const std::vector<RankStepTimes>& times) {
  if (!ctx_.sync().throughput_shares) return;
  SharePlan plan = PlanThroughputShares(shares_, times, share_history_);
  share_history_ = std::move(plan.history);
  if (!plan.shares.has_value()) return;
  if (join_.rank() == 0) {
    LOG(INFO) << "step " << pos_.step << ": batch shares re-planned from the ranks' rates: ["
              << absl::StrJoin(shares_, ", ") << "] -> [" << absl::StrJoin(*plan.shares, ", ")
              << "] samples per step";
  }
  shares_ = std::move(*plan.shares);
  if (ctx_.metrics() != nullptr) ctx_.metrics()->SetBatchShare(shares_[join_.rank()]);
}

void Trainer::ReportStepTimes() {
  const std::optional<StepTimes> times = step_times_.Close();
  if (!times.has_value()) return;
  const double device = times->device_seconds_per_step.value_or(-1);
  if (ctx_.metrics() != nullptr) ctx_.metrics()->SetStepTimes(times->host_seconds_per_step, device);
  if (join_.rank() != 0) return;
  LOG(INFO) << absl::StrFormat("step %d: host %.3f ms/step", pos_.step, times->host_seconds_per_step * 1e3)
            << (device >= 0 ? absl::StrFormat(", gpu %.3f ms/step", device * 1e3) : std::string())
            << " over the last " << times->steps << " steps";
}

absl::Status Trainer::RunEval() {
  // Every rank evaluates its shard with the same running statistics.
  if (auto s = AgreeOnBuffers(); !s.ok()) return s;
  EvalOptions options;
  options.max_samples = spec_.eval().max_samples();
  // Never larger than a training micro-batch: a model that trains in memory
  // must evaluate in it too (on a GPU, a 4x eval batch of a transformer's
  // activations was the job's memory peak).
  options.batch_size = std::min<int64_t>(options.batch_size, spec_.batch_size());
  options.compute_mutex = ctx_.options().compute_mutex;
  auto metrics = Evaluate(ctx_.model(), ctx_.eval_set(), comm_, options);
  if (!metrics.ok()) return metrics.status();
  book_.set_eval(*std::move(metrics));
  if (join_.rank() == 0) {
    std::string line = absl::StrFormat("eval at step %d (epoch %d):", pos_.step, pos_.epoch);
    for (const auto& [name, value] : book_.eval()) absl::StrAppendFormat(&line, " %s %.4f", name, value);
    LOG(INFO) << line;
  }
  return absl::OkStatus();
}

absl::Status Trainer::SaveFinalModel() {
  // state_dict order: parameters, then buffers.
  std::vector<std::pair<std::string, torch::Tensor>> tensors = ctx_.model()->NamedParameters();
  for (auto& named : ctx_.model()->NamedBuffers()) tensors.push_back(std::move(named));
  auto written =
      WriteFinalModel(ctx_.options().work_dir, tensors, {{"format", "pt"}, {"herd_model", ctx_.model()->name()}});
  if (!written.ok()) return written.status();
  final_model_files_ = *std::move(written);
  return absl::OkStatus();
}

absl::Status Trainer::AgreeOnBuffers() {
  // sync_batch's running statistics come from global batch statistics:
  // identical on every rank already (the commit hash checks it).
  if (collective_forward_) return absl::OkStatus();
  return BroadcastBuffers(comm_, ctx_.model()->Buffers(), 0);
}

std::vector<torch::Tensor> Trainer::ReplicaState() const {
  std::vector<torch::Tensor> state = ctx_.params();
  for (auto& buffer : ctx_.model()->Buffers()) state.push_back(std::move(buffer));
  return state;
}

StepBoundary Trainer::Boundary(int64_t rank_samples, int64_t step_samples, bool epoch_end) const {
  StepBoundary at;
  at.rank_samples = rank_samples;
  at.step_samples = step_samples;
  at.step = pos_.step;
  at.epoch_end = epoch_end;
  const int64_t eval_interval = spec_.eval().interval_steps();
  at.eval_due = eval_interval > 0 && pos_.step % eval_interval == 0;
  const int64_t checkpoint_interval = spec_.checkpoint().interval_steps();
  at.checkpoint_due = checkpoint_interval > 0 && pos_.step % checkpoint_interval == 0;
  at.done = Done();
  at.steps_since_commit = pos_.step - last_commit_step_;
  at.log_interval = spec_.log_interval_steps();
  return at;
}

bool Trainer::Done() const { return DoneAt(pos_, spec_.max_steps(), spec_.epochs()); }

CaptureEnvironment Trainer::CaptureEnvironmentNow() const {
  CaptureEnvironment env;
  env.cuda_device = ctx_.device().is_cuda();
  env.graphs_built = CudaGraphsBuilt();
  env.torchscript_model = spec_.model().name() == "torchscript";
  env.fused_optimizer = HasFusedStep(spec_.optimizer().name(), /*amsgrad=*/false);
  env.world_size = join_.world_size();
  env.nccl_backend = group_.data != nullptr && group_.data == group_.nccl.get();
  env.local_steps = spec_.sync().mode() == "average";
  env.skip_step = ctx_.on_nonfinite() == NonFinitePolicy::kSkipStep;
  // The step still reads the host (the sync's update, the ledger, gradient
  // clipping's norm) between forward and optimizer: not capturable yet.
  env.step_free_of_host_sync = false;
  return env;
}

}  // namespace herd
