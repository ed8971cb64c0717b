#include "worker/train/trainer.h"

#include <torch/serialize/archive.h>

#include <glog/logging.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/atomic_file.h"
#include "common/job_spec.h"
#include "worker/train/autocast.h"
#include "worker/train/batch_shares.h"
#include "worker/train/evaluator.h"
#include "worker/train/healing.h"
#include "worker/train/liveness.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/optimizer_factory.h"
#include "worker/train/release_vote.h"
#include "worker/train/replicas.h"
#include "worker/train/straggler.h"
#include "worker/train/sharded_optimizer.h"
#include "worker/train/checkpoint_files.h"
#include "worker/train/torch_errors.h"
#include "worker/train/checkpoint_writer.h"
#include "worker/train/training_position.h"
#include "worker/train/training_state.h"

namespace herd {
namespace {

// cuda_graphs: eager steps before a generation's capture (cuDNN/cuBLAS
// autotuning, the allocator's pools and NCCL's buffers settle in them).
constexpr int64_t kCaptureWarmupSteps = 3;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t ParameterBytes(const std::vector<torch::Tensor>& params) {
  int64_t bytes = 0;
  for (const auto& p : params) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}

}  // namespace

Trainer::Trainer(CoordinatorLink* client, TrainingContext* context, v1::JoinGenerationResponse join,
                 CommunicatorFactory communicators)
    : client_(client),
      ctx_(*context),
      join_(std::move(join)),
      spec_(ctx_.spec),
      pos_(ctx_.position),
      make_communicators_(std::move(communicators)),
      step_capture_(
          spec_.cuda_graphs(), kCaptureWarmupSteps,
          [this](const char* reason) {
            if (ctx_.metrics != nullptr) ctx_.metrics->ObserveCudaGraphFallback(reason);
          },
          [](const std::string& line) { LOG(WARNING) << line; }),
      step_times_(MakeDeviceIntervalTimer(ctx_.device)) {}

CaptureEnvironment Trainer::CaptureEnvironmentNow() const {
  CaptureEnvironment env;
  env.cuda_device = ctx_.device.is_cuda();
  env.graphs_built = CudaGraphsBuilt();
  env.torchscript_model = spec_.model().name() == "torchscript";
  env.fused_optimizer = HasFusedStep(spec_.optimizer().name(), /*amsgrad=*/false);
  env.world_size = join_.world_size();
  env.nccl_backend = group_.data != nullptr && group_.data == group_.nccl.get();
  env.local_steps = spec_.sync().mode() == v1::SYNC_MODE_AVERAGE;
  env.skip_step = ctx_.on_nonfinite == NonFinitePolicy::kSkipStep;
  // The step still reads the host (the sync's update, the ledger, gradient
  // clipping's norm) between forward and optimizer: not capturable yet.
  env.step_free_of_host_sync = false;
  return env;
}

void Trainer::ReportStepTimes() {
  const std::optional<StepTimes> times = step_times_.Close();
  if (!times.has_value()) return;
  const double device = times->device_seconds_per_step.value_or(-1);
  if (ctx_.metrics != nullptr) ctx_.metrics->SetStepTimes(times->host_seconds_per_step, device);
  if (join_.rank() == 0) {
    LOG(INFO) << absl::StrFormat("step %d: host %.3f ms/step", pos_.step, times->host_seconds_per_step * 1e3)
              << (device >= 0 ? absl::StrFormat(", gpu %.3f ms/step", device * 1e3) : std::string())
              << " over the last " << times->steps << " steps";
  }
}

Trainer::~Trainer() {
  // The sum goes with this generation's communicators.
  if (replica_sum_ != nullptr) ctx_.model->SetReplicaSum(nullptr);
}

absl::Status Trainer::Setup() {
  const auto start = std::chrono::steady_clock::now();
  MarkAlive();
  auto group = make_communicators_(join_, ctx_, client_);
  if (!group.ok()) return group.status();
  group_ = std::move(*group);
  comm_ = group_.control.get();
  replica_sum_ = std::make_unique<CommunicatorReplicaSum>(group_.data, ctx_.options.compute_mutex);
  collective_forward_ = ctx_.model->SetReplicaSum(replica_sum_.get());

  auto sync = CreateSyncStrategy(ctx_.sync, ctx_.params, group_.data);
  if (!sync.ok()) return sync.status();
  sync_ = std::move(*sync);
  LOG(INFO) << sync_->Describe();

  if (auto s = ChooseStartingState(); !s.ok()) return s;
  last_commit_step_ = pos_.step;
  // The step times of steps rolled back are no measure of this generation.
  ctx_.window.compute_seconds = 0;
  ctx_.window.wait_seconds = 0;
  ctx_.window.steps = 0;
  // Sync starts from the parameters training starts from (healed, restored or broadcast).
  sync_->StartFromCurrentParameters();
  // The generation's starting state is its first commit.
  if (auto s = Commit(); !s.ok()) return s;
  if (ctx_.ledger != nullptr) ctx_.ledger->GenerationStart(join_.generation(), pos_.step, pos_.epoch, pos_.samples_in_epoch);

  const int64_t per_step = SamplesPerStep(spec_, join_.world_size());
  const int64_t steps_per_epoch = CeilDiv(ctx_.train->size(), per_step);
  // Every generation starts from equal shares: its members' rates are not
  // known yet, and a fixed start keeps sync.shares equal reproducible.
  shares_ = EqualShares(per_step, static_cast<int>(join_.world_size()));
  share_history_ = {};
  first_step_ = pos_.step + 1;
  if (ctx_.metrics != nullptr) ctx_.metrics->SetBatchShare(shares_[join_.rank()]);
  total_steps_ = TotalSteps();
  // optimizer.scale_lr follows this generation's world size.
  lr_plan_ = PlanLearningRate(spec_.optimizer(), join_.world_size());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (ctx_.metrics != nullptr) {
    ctx_.metrics->SetMembership(join_.world_size(), join_.generation());
    ctx_.metrics->ObserveReform(seconds);
  }
  LOG(INFO) << "rank " << join_.rank() << "/" << join_.world_size() << " generation " << join_.generation()
            << " ready in " << absl::StrFormat("%.3f", seconds) << " s (no reload): "
            << lr_plan_.Describe(spec_.optimizer(), join_.world_size()) << ", " << steps_per_epoch
            << " steps per epoch, " << sync_->BucketSummary() << " over " << group_.data->backend();
  step_capture_.StartGeneration(CaptureEnvironmentNow(), join_.generation());
  return absl::OkStatus();
}

absl::Status Trainer::ChooseStartingState() {
  const bool holding = !ctx_.committed.snapshot.empty();
  auto source = ChooseHealSource(comm_, holding ? ctx_.committed.generation : -1, holding ? ctx_.committed.step : -1);
  if (!source.ok()) return source.status();
  if (source->rank >= 0) {
    // Survivors roll back to the newest commit any of them holds; joiners
    // receive it: parameters, optimizer, RNG, sampler position and step. A
    // rank holding that very commit restores its own copy: the same
    // parameters and outer state, and its own inner optimizer state (which
    // sync mode average keeps local to each rank).
    const bool mine = holding && ctx_.committed.generation == source->generation && ctx_.committed.step == source->step;
    if (!source->held_by_all) {
      std::map<std::string, std::string> files;
      if (source->rank == static_cast<int>(join_.rank())) {
        TrainingPosition position;
        std::vector<torch::Tensor> outer;
        if (auto s = ctx_.committed.snapshot.Apply(ctx_.model.get(), ctx_.optimizer.get(), &position, &outer); !s.ok()) return s;
        auto serialized = SerializeTrainingState(ctx_.model.get(), ctx_.optimizer.get(), position, outer);
        if (!serialized.ok()) return serialized.status();
        files = std::move(*serialized);
      }
      if (auto s = BroadcastFiles(comm_, source->rank, &files); !s.ok()) return s;
      if (!mine) {
        if (auto s = RestoreFiles(files); !s.ok()) return s;
      }
    }
    if (mine) {
      if (auto s = RestoreOwnCommit(); !s.ok()) return s;
    }
    LOG(INFO) << "generation " << join_.generation() << ": healed from "
              << (mine ? std::string("its own") : absl::StrCat("rank ", source->rank, "'s"))
              << " commit in memory at step " << pos_.step << " (epoch " << pos_.epoch << ", " << pos_.samples_in_epoch
              << " samples into it)" << (source->held_by_all ? "; every rank held it, nothing sent" : "");
    return absl::OkStatus();
  }
  // Nobody holds a commit: every rank starts from rank 0's parameters,
  // whatever its own init did, then from the newest checkpoint if any.
  if (auto s = BroadcastParameters(comm_, ctx_.params, 0); !s.ok()) return s;
  pos_ = TrainingPosition{};
  if (!join_.checkpoint_path().empty()) return RestoreFromCheckpoint();
  if (join_.start_step() > 0) {
    return absl::DataLossError(absl::StrCat("generation ", join_.generation(), " resumes at step ", join_.start_step(),
                                            " but no member holds the training state and the job has no checkpoint "
                                            "to resume from (set checkpoint.interval_steps)"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::RestoreFiles(const std::map<std::string, std::string>& files) {
  TrainingPosition position;
  std::vector<torch::Tensor> outer_state;
  if (auto s = RestoreTrainingState(files, ctx_.model.get(), ctx_.optimizer.get(), &position, &outer_state); !s.ok()) return s;
  // The outer optimizer (parameter averaging) resumes with its momentum;
  // the sync's per-rank state (int8 residuals) was another rank's: zeroed.
  return ResumeAt(position, outer_state, {});
}

absl::Status Trainer::ResumeAt(const TrainingPosition& position, const std::vector<torch::Tensor>& outer,
                               const std::vector<torch::Tensor>& rank_state) {
  if (auto s = sync_->Resume(outer, rank_state); !s.ok()) return s;
  pos_ = position;
  return absl::OkStatus();
}

absl::Status Trainer::RestoreOwnCommit() {
  TrainingPosition position;
  std::vector<torch::Tensor> outer;
  std::vector<torch::Tensor> own;
  if (auto s = ctx_.committed.snapshot.Apply(ctx_.model.get(), ctx_.optimizer.get(), &position, &outer, &own);
      !s.ok()) {
    return s;
  }
  return ResumeAt(position, outer, own);
}

absl::Status Trainer::Commit() {
  return sync_->Capture(ctx_.model.get(), ctx_.optimizer.get(), pos_, join_.generation(), &ctx_.committed);
}

// Steps left from the current position at this generation's world size.
int64_t Trainer::TotalSteps() const {
  const int64_t per_step = SamplesPerStep(spec_, join_.world_size());
  int64_t total = 0;
  if (spec_.epochs() > 0 && pos_.epoch < spec_.epochs()) {
    total = pos_.step + CeilDiv(ctx_.train->size() - pos_.samples_in_epoch, per_step) +
            (spec_.epochs() - pos_.epoch - 1) * CeilDiv(ctx_.train->size(), per_step);
  } else if (spec_.epochs() > 0) {
    total = pos_.step;
  }
  if (spec_.max_steps() > 0) total = total > 0 ? std::min(total, spec_.max_steps()) : spec_.max_steps();
  return total;
}

bool Trainer::Done() const { return DoneAt(pos_, spec_.max_steps(), spec_.epochs()); }

void Trainer::ZeroGrads() {
  // Undefined rather than zero: the next backward allocates fresh gradients
  // instead of accumulating into last step's bucket views.
  for (auto& p : ctx_.params) p.mutable_grad() = torch::Tensor();
}

StepPlan Trainer::NextMicroBatches() const {
  // Micro-batches of at most batch_size: grad_accumulation of them with
  // equal shares, as many as its share needs with throughput shares or
  // global_batch_size.
  return ctx_.sampler->PlanStep(pos_.epoch, pos_.samples_in_epoch, shares_, static_cast<int>(join_.rank()),
                                spec_.batch_size());
}

Batch Trainer::TakeBatch(const std::vector<int64_t>& indices) {
  Batch batch = ctx_.prefetcher != nullptr ? ctx_.prefetcher->Take(indices) : ctx_.train->Get(indices);
  if (ctx_.device.is_cuda()) {
    // Pinned host memory (the prefetcher's already is) lets the copy run
    // asynchronously to the GPU, on the step's stream.
    batch.inputs = batch.inputs.pin_memory().to(ctx_.device, /*non_blocking=*/true);
    batch.targets = batch.targets.pin_memory().to(ctx_.device, /*non_blocking=*/true);
  }
  return batch;
}

void Trainer::PrefetchNextStep(int64_t step_samples) {
  if (ctx_.prefetcher == nullptr) return;
  // Where this step leaves training (TrainStep advances by the same rule),
  // unless a commit point changes the plan: then the prefetched batches are a miss.
  const TrainingPosition after = AdvancedByStep(pos_, step_samples, ctx_.train->size());
  if (DoneAt(after, spec_.max_steps(), spec_.epochs())) return;
  StepPlan next = ctx_.sampler->PlanStep(after.epoch, after.samples_in_epoch, shares_, static_cast<int>(join_.rank()),
                                         spec_.batch_size());
  // Only what TrainStep will take: it skips empty micro-batches unless the forward is a collective.
  std::vector<std::vector<int64_t>> taken;
  for (auto& micro : next.micro_batches) {
    if (!micro.empty() || collective_forward_) taken.push_back(std::move(micro));
  }
  ctx_.prefetcher->Prefetch(taken);
}

void Trainer::ForwardBackward(const Batch& batch, int64_t rows, double share, StepTimer* timer, StepStats* stats,
                              ProgressWindow* losses) {
  timer->Lap();  // loading the batch is neither forward nor backward
  std::unique_lock<std::mutex> compute;
  if (ctx_.options.compute_mutex != nullptr) compute = std::unique_lock<std::mutex>(*ctx_.options.compute_mutex);
  ModelOutput out = [&] {
    CudaBf16Autocast autocast(spec_.bf16_autocast() && ctx_.device.is_cuda());
    try {
      return ctx_.model->Forward(batch);
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
  // Summed and checked on the device, read at the next report: no host sync per step.
  // (float64 += float32 * rows: promoted in the one kernel, no separate cast.)
  losses->loss_sum.add_(out.loss.detach(), static_cast<double>(rows));
  losses->loss_count += rows;
  if (ctx_.on_nonfinite == NonFinitePolicy::kFail) {
    ctx_.window.nonfinite.Observe(out.loss, pos_.step + 1, NonFiniteWatch::kLoss);
  }
}

absl::Status Trainer::TrainStep() {
  const StepPlan plan = NextMicroBatches();
  const std::vector<std::vector<int64_t>>& micros = plan.micro_batches;
  const int64_t global = plan.global_count;
  int64_t mine = 0;
  for (const auto& micro : micros) mine += static_cast<int64_t>(micro.size());
  // Mode average after warmup: no gradient sync, each rank steps on the
  // mean loss of its own samples, and rounds average the parameters.
  const bool local = sync_->LocalStep(pos_.step);
  RecordInLedger(micros);
  step_times_.BeforeStep();
  StepTimer timer;  // for metrics: a few clock reads per micro-batch
  StepStats stats;
  // skip_step holds the step's losses until the step is kept.
  const bool may_skip = ctx_.on_nonfinite == NonFinitePolicy::kSkipStep;
  ProgressWindow step_losses;
  if (may_skip) step_losses.Reset(ctx_.device, step_losses.start);
  ZeroGrads();
  for (size_t m = 0; m < micros.size(); ++m) {
    if (m + 1 == micros.size() && !local) sync_->ArmBackward();
    const auto& indices = micros[m];
    // A short last step leaves some ranks idle, unless the forward is a
    // collective: then they run it on no rows.
    if (indices.empty() && !collective_forward_) continue;
    const Batch batch = TakeBatch(indices);
    // The next step's batches are gathered while this one computes.
    if (m + 1 == micros.size()) PrefetchNextStep(global);
    // Scaled so that summing gradients over ranks yields the global-batch
    // mean; a local step takes the mean over this rank's samples instead.
    const auto rows = static_cast<int64_t>(indices.size());
    ForwardBackward(batch, rows, static_cast<double>(rows) / static_cast<double>(local ? mine : global), &timer,
                    &stats, may_skip ? &step_losses : &ctx_.window);
  }
  if (!replica_sum_->status().ok()) return replica_sum_->status();
  timer.Lap();
  ctx_.learning_rate = LearningRateAt(spec_.schedule(), lr_plan_, pos_.step, std::max<int64_t>(1, total_steps_));
  SetLearningRate(ctx_.optimizer.get(), ctx_.learning_rate);
  const UpdateInputs update{ctx_.optimizer.get(), spec_.grad_clip_norm(), pos_.step, may_skip,
                            step_losses.loss_sum, &ctx_.host_reads};
  if (auto s = sync_->Update(local, update); !s.ok()) return s;
  KeepOrDropStep(step_losses);
  // The sync measures its own wait; the rest of the update is the optimizer's.
  stats.optimizer_seconds = timer.Lap() - sync_->last_step().finish_seconds;
  stats.step_seconds = timer.Total();
  step_times_.AfterStep(stats.step_seconds);
  ctx_.traffic.samples += mine;
  ctx_.window.samples += global;
  ctx_.global_samples += global;
  const int64_t epoch_before = pos_.epoch;
  pos_ = AdvancedByStep(pos_, global, ctx_.train->size());
  const bool epoch_end = pos_.epoch != epoch_before;
  if (auto s = sync_->AfterStep(local, Boundary(mine, global, epoch_end), &ctx_.traffic); !s.ok()) return s;
  const double wall_seconds = timer.Total();
  ctx_.traffic.train_seconds += wall_seconds;
  // Straggler detection (straggler.h): this step's wall time (averaging
  // rounds after it included) split into the sync's wait and the rest.
  const double wait_seconds = sync_->last_step().wait_seconds;
  stats.compute_seconds = std::max(0.0, wall_seconds - wait_seconds);
  if (pos_.step != first_step_) {
    ctx_.window.compute_seconds += stats.compute_seconds;
    ctx_.window.wait_seconds += wait_seconds;
    ++ctx_.window.steps;
  }
  if (epoch_end) {
    if (auto s = RunEval(); !s.ok()) return s;
  }
  ObserveStep(stats);
  return absl::OkStatus();
}

void Trainer::RecordInLedger(const std::vector<std::vector<int64_t>>& micro_batches) {
  if (ctx_.ledger == nullptr) return;
  std::vector<int64_t> ids;
  for (const auto& micro : micro_batches) ids.insert(ids.end(), micro.begin(), micro.end());
  ctx_.ledger->Step(join_.generation(), pos_.step, pos_.epoch, ids);
}

void Trainer::KeepOrDropStep(const ProgressWindow& step_losses) {
  const SyncStepCost& update = sync_->last_step();
  if (ctx_.on_nonfinite == NonFinitePolicy::kFail) {
    if (update.grad_norm.defined()) {
      ctx_.window.nonfinite.Observe(update.grad_norm, pos_.step + 1, NonFiniteWatch::kGradientNorm);
    }
    return;
  }
  if (!update.skipped) {
    ctx_.window.loss_sum.add_(step_losses.loss_sum);
    ctx_.window.loss_count += step_losses.loss_count;
    return;
  }
  // Every rank saw the same flag: every rank drops this step.
  ++ctx_.nonfinite_steps_skipped;
  if (ctx_.metrics != nullptr) ctx_.metrics->ObserveNonFiniteSkip();
  LOG(WARNING) << "step " << pos_.step + 1
               << " skipped: a loss or gradient was NaN or infinite on some rank (on_nonfinite: skip_step)";
  ctx_.nonfinite_warning = absl::StrCat(ctx_.nonfinite_steps_skipped, ctx_.nonfinite_steps_skipped == 1 ? " step" : " steps",
                                        " skipped for a NaN or infinite loss or gradient (on_nonfinite: skip_step), "
                                        "the last at step ", pos_.step + 1);
}

void Trainer::ObserveStep(StepStats stats) const {
  if (ctx_.metrics == nullptr) return;
  const SyncStepCost& sync = sync_->last_step();
  stats.allreduce_wait_seconds = sync.wait_seconds;
  stats.allreduce_bytes = sync.wire_bytes;
  stats.buckets_launched_during_backward = sync.launched_during_backward;
  stats.optimizer_state_bytes = OptimizerStateBytes(*ctx_.optimizer);
  stats.step = pos_.step;
  stats.epoch = pos_.epoch;
  ctx_.metrics->ObserveStep(stats);
  ctx_.metrics->ObserveSyncTraffic(ctx_.traffic);
}

absl::Status Trainer::CloseProgressWindow(bool final) {
  ProgressWindow& window = ctx_.window;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - window.start).count();
  if (final) {
    // A finished job reports its training throughput, not that of its
    // last interval (which includes the final evaluation).
    if (ctx_.traffic.train_seconds > 0) {
      ctx_.samples_per_second = static_cast<double>(ctx_.global_samples) / ctx_.traffic.train_seconds;
    }
  } else if (window.samples > 0 && seconds > 0) {
    ctx_.samples_per_second = static_cast<double>(window.samples) / seconds;
  }
  // The window's one host read: its loss and (on_nonfinite: fail) the
  // first non-finite value of its steps.
  if (window.loss_count > 0) {
    std::vector<torch::Tensor> values = window.nonfinite.Tensors();
    values.push_back(window.loss_sum);
    const std::vector<double> read = ctx_.host_reads.Read(values);
    if (auto s = NonFiniteWatch::Verdict(read[0], read[1], read[2]); !s.ok()) return s;
    ctx_.last_loss = read[3] / static_cast<double>(window.loss_count);
  }
  if (ctx_.metrics != nullptr) ctx_.metrics->SetLoss(ctx_.last_loss);
  window.Reset(ctx_.device, now);
  return absl::OkStatus();
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

absl::Status Trainer::AgreeOnBuffers() {
  // sync_batch's running statistics come from global batch statistics:
  // identical on every rank already (the commit hash checks it).
  if (collective_forward_) return absl::OkStatus();
  return BroadcastBuffers(comm_, ctx_.model->Buffers(), 0);
}

std::vector<torch::Tensor> Trainer::ReplicaState() const {
  std::vector<torch::Tensor> state = ctx_.params;
  for (auto& buffer : ctx_.model->Buffers()) state.push_back(std::move(buffer));
  return state;
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
  options.compute_mutex = ctx_.options.compute_mutex;
  auto metrics = Evaluate(ctx_.model.get(), *ctx_.eval, comm_, options);
  if (!metrics.ok()) return metrics.status();
  ctx_.eval_metrics = *metrics;
  if (ctx_.metrics != nullptr) ctx_.metrics->SetEval(ctx_.eval_metrics);
  if (join_.rank() == 0) {
    std::string line = absl::StrFormat("eval at step %d (epoch %d):", pos_.step, pos_.epoch);
    for (const auto& [name, value] : ctx_.eval_metrics) absl::StrAppendFormat(&line, " %s %.4f", name, value);
    LOG(INFO) << line;
  }
  return absl::OkStatus();
}

absl::Status Trainer::CheckCoordinatorVerdict() const {
  if (ctx_.reporter == nullptr) return absl::OkStatus();
  if (ctx_.reporter->cancelled()) return absl::CancelledError("the job was cancelled");
  if (ctx_.reporter->fenced_generation() >= join_.generation()) {
    // A newer generation exists (a worker joined or left, a peer failed).
    return absl::FailedPreconditionError(
        absl::StrCat("generation ", join_.generation(), " was superseded (the coordinator fenced it)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RankStepTimes>> Trainer::GatherAtCommit() {
  // Trivially copyable, no padding: every rank runs the same herd-trainer.
  struct CommitShare {
    uint64_t hash;
    double compute_seconds;
    double wait_seconds;
    int64_t steps;
  };
  static_assert(std::is_trivially_copyable_v<CommitShare> && sizeof(CommitShare) == 32);
  const CommitShare mine{ParameterHash(ReplicaState()), ctx_.window.compute_seconds, ctx_.window.wait_seconds,
                         ctx_.window.steps};
  std::vector<CommitShare> all(comm_->size());
  if (auto s = comm_->AllGather(&mine, sizeof(mine), all.data()); !s.ok()) return s;
  std::vector<uint64_t> hashes;
  std::vector<RankStepTimes> times;
  for (const CommitShare& share : all) {
    hashes.push_back(share.hash);
    times.push_back({share.compute_seconds, share.wait_seconds, share.steps});
  }
  if (auto s = CheckReplicaHashes(hashes, pos_.step); !s.ok()) return s;
  return times;
}

void Trainer::ReplanShares(const std::vector<RankStepTimes>& times) {
  if (!ctx_.sync.throughput_shares) return;
  SharePlan plan = PlanThroughputShares(shares_, times, share_history_);
  share_history_ = std::move(plan.history);
  if (!plan.shares.has_value()) return;
  if (join_.rank() == 0) {
    LOG(INFO) << "step " << pos_.step << ": batch shares re-planned from the ranks' rates: ["
              << absl::StrJoin(shares_, ", ") << "] -> [" << absl::StrJoin(*plan.shares, ", ")
              << "] samples per step";
  }
  shares_ = std::move(*plan.shares);
  if (ctx_.metrics != nullptr) ctx_.metrics->SetBatchShare(shares_[join_.rank()]);
}

absl::Status Trainer::CommitPoint(bool final) {
  // First, so the device's stop event follows the interval's last step, not the commit's own work.
  ReportStepTimes();
  if (auto s = AgreeOnBuffers(); !s.ok()) return s;
  // Replicas must agree at every commit point; a mismatch fails loudly. One
  // rank has nobody to disagree with, and hashing costs a pass over the state.
  // The same all-gather carries each rank's step times of the log interval
  // for straggler detection and throughput shares: no extra collective.
  std::optional<StragglerSummary> straggler;
  std::vector<RankStepTimes> rank_times;
  std::vector<int64_t> interval_shares;  // the shares the interval ran on
  if (comm_->size() > 1) {
    auto gathered = GatherAtCommit();
    if (!gathered.ok()) return gathered.status();
    straggler = FindStraggler(*gathered);
    if (join_.rank() == 0) {
      LOG(INFO) << "step " << pos_.step << ": compute/wait per step and samples per step of each rank since the "
                << "last commit: " << DescribeStepTimes(*gathered, shares_);
    }
    rank_times = std::move(*gathered);
    interval_shares = shares_;
    ReplanShares(rank_times);
  }
  last_commit_step_ = pos_.step;
  // Held in memory: what the next generation heals from if this one fails.
  if (auto s = Commit(); !s.ok()) return s;
  if (auto s = CheckpointAtCommit(final); !s.ok()) return s;

  if (auto s = CloseProgressWindow(final); !s.ok()) return s;
  v1::ReportProgressRequest report;
  report.set_job_id(ctx_.options.job_id);
  report.set_generation(join_.generation());
  report.set_rank(join_.rank());
  report.set_step(pos_.step);
  report.set_epoch(pos_.epoch);
  report.set_samples_in_epoch(pos_.samples_in_epoch);
  report.set_samples_per_second(ctx_.samples_per_second);
  report.set_loss(ctx_.last_loss);
  report.set_total_steps(total_steps_);
  const SyncStatus sync_status = sync_->Status();
  std::string warning = ctx_.CheckpointWarning();
  if (!sync_status.warning.empty()) warning = warning.empty() ? sync_status.warning : warning + "; " + sync_status.warning;
  report.set_checkpoint_warning(warning);
  report.set_learning_rate(ctx_.learning_rate);
  if (ctx_.metrics != nullptr) ctx_.metrics->SetOverlapSteps(sync_status.overlap_steps);
  if (join_.rank() == 0 && sync_status.overlap_steps > 0) {
    v1::SyncState* state = report.mutable_sync_state();
    state->set_overlap_steps(sync_status.overlap_steps);
    state->set_overlap_auto(sync_status.overlap_auto);
    state->set_round_seconds(sync_status.round_seconds);
    state->set_step_seconds(sync_status.step_seconds);
  }
  for (const auto& [name, value] : ctx_.eval_metrics) (*report.mutable_eval())[name] = value;
  if (final) {
    for (const v1::ModelFile& file : final_model_files_) *report.add_final_model() = file;
  }
  if (join_.rank() == 0) {
    LOG(INFO) << absl::StrFormat("step %d/%d epoch %d loss %.4f %.0f samples/s%s", pos_.step, total_steps_, pos_.epoch,
                                 ctx_.last_loss, ctx_.samples_per_second, final ? " (final)" : "");
    if (straggler.has_value()) {
      v1::Straggler* out = report.mutable_straggler();
      out->set_rank(straggler->rank);
      out->set_compute_seconds_per_step(straggler->compute_seconds_per_step);
      out->set_median_compute_seconds_per_step(straggler->median_compute_seconds_per_step);
      out->set_others_wait_seconds_per_step(straggler->others_wait_seconds_per_step);
      out->set_step_seconds(straggler->step_seconds);
      out->set_holdback_fraction(straggler->holdback_fraction);
      out->set_step(pos_.step);
      if (ctx_.metrics != nullptr) ctx_.metrics->SetStraggler(straggler->rank, straggler->holdback_fraction);
      // Every rank beside it (FindStraggler found the times valid).
      for (size_t rank = 0; rank < rank_times.size(); ++rank) {
        const RankStepTimes& times = rank_times[rank];
        const double steps = times.steps > 0 ? static_cast<double>(times.steps) : 1.0;
        v1::RankInterval* interval = report.add_ranks();
        interval->set_compute_seconds_per_step(times.compute_seconds / steps);
        interval->set_wait_seconds_per_step(times.wait_seconds / steps);
        interval->set_samples_per_step(interval_shares[rank]);
        interval->set_batch_share(shares_[rank]);
      }
    }
  }
  ctx_.last_report = report;
  // Sent off the step loop: a slow or stalled coordinator never holds training up.
  if (ctx_.reporter != nullptr) ctx_.reporter->PostProgress(std::move(report));
  // The job's last commit point needs no vote: training ends there anyway.
  // A trainer that cannot be asked to leave takes no vote: every rank of a
  // job runs the same herd-trainer, which always can (trainer_main), so the
  // ranks agree; in-process tests without it keep their collective sequence.
  if (!final && !Done() && ctx_.options.leave_request) {
    if (auto s = VoteOnRelease(); !s.ok() || boundary_.has_value()) return s;
  }
  return CheckCoordinatorVerdict();
}

absl::Status Trainer::VoteOnRelease() {
  const LeaveRequest asked = ctx_.options.leave_request();
  const std::vector<int64_t> heard =
      asked.generation == join_.generation() ? asked.ranks : std::vector<int64_t>{};  // older: stale
  const bool reform = ctx_.options.reform_requested_generation &&
                      ctx_.options.reform_requested_generation() == join_.generation();
  auto vote = TakeBoundaryVote(comm_, heard, reform);
  if (!vote.ok()) return vote.status();
  const int leavers = static_cast<int>(vote->leavers.size());
  if (leavers == join_.world_size()) {
    auto checkpointed = CheckpointForAllLeaving();
    if (!checkpointed.ok()) return checkpointed.status();
    if (!*checkpointed) {
      // Leaving now would cost the steps since the last recorded
      // checkpoint: stay, and vote again at the next commit point.
      LOG_IF(WARNING, join_.rank() == 0) << "every rank is asked to leave after step " << pos_.step
                                         << ", but its checkpoint is not recorded; training on";
      return absl::OkStatus();
    }
    LOG(INFO) << "rank " << join_.rank() << ": every rank leaves after step " << pos_.step << ", checkpointed";
    boundary_ = GenerationEnd::AtBoundary(GenerationOutcome::kReleasedAll, pos_.step);
    return absl::OkStatus();
  }
  if (leavers > 0) {
    // Every rank committed this step and saw the same set: the leavers go,
    // the others re-form from this commit.
    const bool leaving = std::count(vote->leavers.begin(), vote->leavers.end(), join_.rank()) > 0;
    LOG(INFO) << "rank " << join_.rank() << ": rank(s) " << absl::StrJoin(vote->leavers, ",") << " leave after step "
              << pos_.step << (leaving ? ", this one included" : "");
    boundary_ = GenerationEnd::AtBoundary(leaving ? GenerationOutcome::kReleased : GenerationOutcome::kPeerReleased,
                                          pos_.step, leavers);
    return absl::OkStatus();
  }
  if (vote->reformers > 0) {
    LOG(INFO) << "rank " << join_.rank() << ": the job re-forms after step " << pos_.step << " so workers can join";
    boundary_ = GenerationEnd::AtBoundary(GenerationOutcome::kReformed, pos_.step);
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Trainer::CheckpointForAllLeaving() {
  bool recorded = false;
  if (join_.rank() == 0 && ctx_.reporter != nullptr) {
    // The interval may have written this very step already.
    absl::Status saved = FinishCheckpointWrites();
    if (saved.ok() && (ctx_.last_checkpoint_step != pos_.step || !ctx_.checkpoint_warning.empty())) {
      saved = SaveCheckpoint();
      if (saved.ok()) saved = FinishCheckpointWrites();
    }
    if (saved.ok() && ctx_.checkpoint_warning.empty()) {
      // The peers wait in the next collective meanwhile: stay well inside
      // its timeout.
      const auto wait = std::min<std::chrono::milliseconds>(std::chrono::seconds(30), ctx_.CollectiveTimeout() / 2);
      ctx_.reporter->Flush(wait);
      recorded = ctx_.reporter->recorded_checkpoint_step() == pos_.step;
    } else if (!saved.ok()) {
      LOG(WARNING) << "checkpoint of step " << pos_.step << " for leaving failed: " << saved;
    }
  }
  return AgreeOnCheckpoint(comm_, join_.rank(), recorded);
}

absl::Status Trainer::SaveFinalModel() {
  // state_dict order: parameters, then buffers.
  std::vector<std::pair<std::string, torch::Tensor>> tensors = ctx_.model->NamedParameters();
  for (auto& named : ctx_.model->NamedBuffers()) tensors.push_back(std::move(named));
  auto written =
      WriteFinalModel(ctx_.options.work_dir, tensors, {{"format", "pt"}, {"herd_model", ctx_.model->name()}});
  if (!written.ok()) return written.status();
  final_model_files_ = *std::move(written);
  return absl::OkStatus();
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
      if (auto s = CheckCoordinatorVerdict(); !s.ok()) return s;
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
    if (ctx_.eval_metrics.empty() || pos_.samples_in_epoch != 0) {
      if (auto s = RunEval(); !s.ok()) return s;
    }
    // model-final.pt holds the buffers too: the same on every rank.
    if (auto s = AgreeOnBuffers(); !s.ok()) return s;
    if (auto s = VerifyReplicasBitwise(comm_, ctx_.params); !s.ok()) return s;
    LOG(INFO) << "replicas verified bitwise across " << join_.world_size() << " ranks (all-gather of all parameters)";
    LOG(INFO) << sync_->TrafficSummary(ctx_.traffic);
    if (auto s = SaveFinalModel(); !s.ok()) return s;
    return CommitPoint(true);
  } catch (const std::exception& e) {
    // Out of memory fails the job at once (RESOURCE_EXHAUSTED), naming the step.
    return TrainingError(e, {absl::StrCat("training step ", step_reached()), ctx_.model->name(), ctx_.device.str(),
                             spec_.batch_size(), ParameterBytes(ctx_.params)});
  }
}

}  // namespace herd

namespace herd {

absl::Status Trainer::CheckpointAtCommit(bool final) {
  // What earlier writes came to first: a failure under on_failure: fail
  // ends the job here, at the commit point after it.
  if (auto s = TakeCheckpointOutcomes(); !s.ok()) return s;
  const int64_t interval = spec_.checkpoint().interval_steps();
  if (interval > 0 && pos_.step % interval == 0 && pos_.step != ctx_.last_checkpoint_step && join_.rank() == 0) {
    if (auto s = SaveCheckpoint(); !s.ok()) return s;
  }
  // The final report tells what every write came to.
  if (!final) return absl::OkStatus();
  return FinishCheckpointWrites();
}

absl::Status Trainer::FinishCheckpointWrites() {
  if (ctx_.checkpoint_writer != nullptr) ctx_.checkpoint_writer->Wait();
  return TakeCheckpointOutcomes();
}

absl::Status Trainer::TakeCheckpointOutcomes() {
  if (ctx_.checkpoint_writer == nullptr) return absl::OkStatus();
  for (const CheckpointOutcome& outcome : ctx_.checkpoint_writer->TakeFinished()) {
    if (outcome.status.ok()) {
      ctx_.checkpoint_warning.clear();
      continue;
    }
    // Storage trouble (full, read-only, missing, failing) costs the job one
    // checkpoint, not its progress, unless the job asked to fail.
    const std::string cause =
        absl::StrCat("checkpoint at step ", outcome.step, " failed: ", outcome.status.message());
    if (spec_.checkpoint().on_failure() == v1::ON_FAILURE_FAIL) {
      return absl::Status(absl::StatusCode::kResourceExhausted, absl::StrCat(cause, " (checkpoint.on_failure: fail)"));
    }
    LOG(WARNING) << cause << "; training goes on (checkpoint.on_failure: continue)";
    if (ctx_.checkpoint_warning.empty()) ctx_.checkpoint_warning = cause;
  }
  return absl::OkStatus();
}

absl::Status Trainer::SaveCheckpoint() {
  ctx_.last_checkpoint_step = pos_.step;  // tried once per step, whatever the outcome
  if (ctx_.checkpoint_writer == nullptr) {
    CheckpointWriterOptions options;
    options.root = ctx_.options.checkpoint_root;
    options.job_id = ctx_.options.job_id;
    options.make_optimizer = [optimizer = spec_.optimizer()](std::vector<torch::Tensor> params) {
      return MakeOptimizer(optimizer, std::move(params));
    };
    options.reporter = ctx_.reporter;
    options.metrics = ctx_.metrics;
    options.before_write = ctx_.options.checkpoint_before_write;
    ctx_.checkpoint_writer = std::make_unique<CheckpointWriter>(std::move(options));
  }
  // Only the host copy happens here; the files are written off the step
  // loop (a second save waits for the first).
  return ctx_.checkpoint_writer->Save(ctx_.model.get(), ctx_.optimizer.get(),
                                      pos_, sync_->OuterState(),
                                      join_.generation(), ctx_.learning_rate);
}

absl::Status Trainer::RestoreFromCheckpoint() {
  // The catalog's newest first, then older ones on disk: a corrupt or
  // truncated checkpoint is skipped for the previous complete one.
  std::vector<std::string> candidates = {join_.checkpoint_path()};
  for (const auto& folder : ListCheckpointFolders(ctx_.options.checkpoint_root, ctx_.options.job_id)) {
    if (folder.relative_path != join_.checkpoint_path()) candidates.push_back(folder.relative_path);
  }
  std::vector<std::string> skipped;  // "PATH: why", newest first
  for (const auto& path : candidates) {
    auto files = ReadCheckpointFolder(ctx_.options.checkpoint_root, path);
    absl::Status restored = files.ok() ? RestoreFiles(*files) : files.status();
    if (!restored.ok()) {
      LOG(WARNING) << "skipping checkpoint " << path << ": " << restored;
      skipped.push_back(absl::StrCat(path, ": ", restored.message()));
      continue;
    }
    ctx_.last_checkpoint_step = pos_.step;
    LOG(INFO) << "resumed from checkpoint " << path << " at step " << pos_.step << " (epoch " << pos_.epoch << ", "
              << pos_.samples_in_epoch << " samples into it)";
    if (!skipped.empty()) {
      // Users see the fallback in herd status and herd watch, not only here.
      ctx_.restore_warning = absl::StrCat("unusable checkpoint skipped (", absl::StrJoin(skipped, "; "),
                                          "); resumed from ", path, " at step ", pos_.step);
    }
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat("no usable checkpoint for job ", ctx_.options.job_id, " under ",
                                          ctx_.options.checkpoint_root, " (tried ", candidates.size(), ")"));
}

}  // namespace herd
