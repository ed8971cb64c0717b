#include "worker/train/trainer.h"

#include <glog/logging.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/shm_allreduce.h"
#include "worker/train/autocast.h"
#include "worker/train/evaluator.h"
#include "worker/train/liveness.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/optimizer_factory.h"
#include "worker/train/parameter_averaging.h"
#include "worker/train/replicas.h"
#include "worker/train/checkpoint_files.h"
#include "worker/train/training_state.h"

namespace herd {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status TorchError(const char* what, const std::exception& e) {
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

}  // namespace

Trainer::Trainer(ClusterClient* client, v1::JoinGenerationResponse join, TrainerOptions options,
                 TrainerMetrics* metrics, CommittedState* committed, SampleLedger* ledger)
    : client_(client),
      metrics_(metrics),
      committed_(committed),
      ledger_(ledger),
      join_(std::move(join)),
      spec_(join_.spec()),
      options_(std::move(options)),
      device_(options_.device == "cuda" ? torch::Device(torch::kCUDA, std::max(0, options_.gpu))
                                        : torch::Device(torch::kCPU)) {}

Trainer::~Trainer() = default;

absl::Status Trainer::CheckDevice() const {
  if (!device_.is_cuda()) return absl::OkStatus();
  if (!torch::cuda::is_available()) {
    return absl::UnimplementedError(
        "device cuda: this trainer's LibTorch has no usable CUDA (build with HERD_LIBTORCH pointing at a CUDA "
        "LibTorch, see worker/comm/README.md) or the machine has no GPU");
  }
  if (device_.index() >= static_cast<int>(torch::cuda::device_count())) {
    return absl::InvalidArgumentError(absl::StrCat("device cuda: GPU ", device_.index(), " does not exist (",
                                                   torch::cuda::device_count(), " visible)"));
  }
  return absl::OkStatus();
}

// CPU ranks that all share one host address sum gradients in shared memory.
bool Trainer::UseSharedMemory() const {
  if (device_.is_cuda() || spec_.sync().same_host_transport() != "shm" || join_.world_size() < 2) return false;
  for (const auto& peer : join_.peers()) {
    if (peer.address() != join_.peers(0).address()) return false;
  }
  return true;
}

absl::Status Trainer::CreateCommunicators() {
  GlooOptions gloo;
  gloo.rank = static_cast<int>(join_.rank());
  gloo.size = static_cast<int>(join_.world_size());
  gloo.host = join_.peers(join_.rank()).address();
  gloo.timeout = options_.collective_timeout.count() > 0
                     ? options_.collective_timeout
                     : std::chrono::milliseconds(static_cast<int64_t>(spec_.collective_timeout_seconds() * 1000));
  gloo.key_prefix = "gloo/";
  auto comm = CreateGlooCommunicator(gloo, client_->KvStore(join_.generation()));
  if (!comm.ok()) return comm.status();
  comm_ = std::move(*comm);
  data_comm_ = comm_.get();
  if (UseSharedMemory()) {
    // Slots as large as all parameters hold any bucket; past 64 MiB larger
    // buckets go through Gloo rather than fill /dev/shm. The in-place area
    // holds the gradient buckets themselves (plus each one's alignment); the
    // scratch area serves other float32 sums (parameter averaging, metrics).
    size_t bytes = 0;
    for (const auto& p : params_) bytes += p.nbytes();
    ShmAllReduceOptions shm;
    shm.rank = gloo.rank;
    shm.size = gloo.size;
    shm.slot_bytes = std::min<size_t>(bytes, size_t{64} << 20);
    shm.in_place_bytes = shm.slot_bytes + 64 * params_.size();
    shm.timeout = gloo.timeout;
    shm.key_prefix = "shm/";
    auto created = CreateShmAllReduce(shm, comm_.get(), client_->KvStore(join_.generation()));
    if (created.ok()) {
      shm_ = std::move(*created);
      data_comm_ = shm_.get();
    } else if (created.status().code() != absl::StatusCode::kResourceExhausted) {
      return created.status();
    } else {
      LOG(WARNING) << "shared-memory all-reduce unavailable, using Gloo over TCP: " << created.status();
    }
  }
  if (device_.is_cuda()) {
    NcclOptions nccl;
    nccl.rank = gloo.rank;
    nccl.size = gloo.size;
    nccl.device = device_.index();
    nccl.timeout = gloo.timeout;
    nccl.key_prefix = "nccl/";
    nccl.compute_stream = nullptr;  // LibTorch computes on the legacy default stream
    auto created = CreateNcclCommunicator(nccl, client_->KvStore(join_.generation()));
    if (!created.ok()) return created.status();
    nccl_ = std::move(*created);
    data_comm_ = nccl_.get();
  }
  return absl::OkStatus();
}

absl::Status Trainer::Setup() {
  MarkAlive();
  if (auto s = CheckDevice(); !s.ok()) return s;
  torch::set_num_threads(static_cast<int>(spec_.threads()));
  auto train = LoadDataset(spec_.dataset(), /*train=*/true, join_.seed());
  if (!train.ok()) return train.status();
  train_ = std::move(*train);
  auto eval = LoadDataset(spec_.dataset(), /*train=*/false, join_.seed());
  if (!eval.ok()) return eval.status();
  eval_ = std::move(*eval);
  if (train_->size() == 0) return absl::InvalidArgumentError("dataset: the training set is empty");

  auto model = CreateModel(spec_.model(), ModelInputInfo{train_->sample_shape(), train_->num_classes()}, join_.seed());
  if (!model.ok()) return model.status();
  model_ = std::move(*model);
  model_->To(device_);
  model_->SetTraining(true);
  params_ = model_->Parameters();

  if (auto s = CreateCommunicators(); !s.ok()) return s;

  GradientSyncOptions sync;
  sync.first_bucket_mib = spec_.sync().first_bucket_mib();
  sync.bucket_cap_mib = spec_.sync().bucket_cap_mib();
  sync.compression = spec_.sync().compression();
  sync_ = std::make_unique<GradientSync>(params_, data_comm_, sync);
  if (spec_.sync().mode() == "average") {
    ParameterAveragingOptions averaging;
    averaging.first_bucket_mib = sync.first_bucket_mib;
    averaging.bucket_cap_mib = sync.bucket_cap_mib;
    averaging.compression = sync.compression;
    averaging.outer = spec_.sync().outer().kind();
    averaging.outer_lr = spec_.sync().outer().lr();
    averaging.outer_momentum = spec_.sync().outer().momentum();
    auto created = ParameterAveraging::Create(params_, data_comm_, averaging);
    if (!created.ok()) return created.status();
    averaging_ = std::move(*created);
    LOG(INFO) << "sync average: a round every " << spec_.sync().every() << " local steps after "
              << spec_.sync().warmup_steps() << " all-reduce steps, outer " << averaging.outer;
  }

  auto optimizer = MakeOptimizer(spec_.optimizer(), params_);
  if (!optimizer.ok()) return optimizer.status();
  optimizer_ = std::move(*optimizer);

  sampler_ = std::make_unique<EpochSampler>(train_->size(), join_.seed());
  if (auto s = ChooseStartingState(); !s.ok()) return s;
  last_commit_step_ = step_;
  // Averaging starts from the parameters training starts from (healed, restored or broadcast).
  if (averaging_ != nullptr) averaging_->ResetAnchor();
  // The generation's starting state is its first commit.
  if (auto s = Commit(); !s.ok()) return s;
  if (ledger_ != nullptr) ledger_->GenerationStart(join_.generation(), step_, epoch_, position_);

  const int64_t per_step = join_.world_size() * spec_.batch_size() * spec_.grad_accumulation();
  const int64_t steps_per_epoch = CeilDiv(train_->size(), per_step);
  total_steps_ = TotalSteps();
  if (metrics_ != nullptr) metrics_->SetMembership(join_.world_size(), join_.generation());
  LOG(INFO) << "rank " << join_.rank() << "/" << join_.world_size() << " generation " << join_.generation()
            << ": " << spec_.model().name() << " with " << FlattenParameters(params_).numel() << " parameters, "
            << train_->size() << " training samples, " << steps_per_epoch << " steps per epoch, "
            << sync_->bucket_elements().size() << " gradient buckets over " << data_comm_->backend()
            << (sync_->in_place_buckets() > 0 ? absl::StrCat(" (", sync_->in_place_buckets(), " summed in place)") : "");
  return absl::OkStatus();
}

absl::Status Trainer::ChooseStartingState() {
  const bool holding = committed_ != nullptr && !committed_->snapshot.empty();
  auto source = ChooseHealSource(comm_.get(), holding ? committed_->generation : -1, holding ? committed_->step : -1);
  if (!source.ok()) return source.status();
  if (*source >= 0) {
    // Survivors roll back to the newest commit any of them holds; joiners
    // receive it: parameters, optimizer, RNG, sampler position and step.
    std::map<std::string, std::string> files;
    if (*source == static_cast<int>(join_.rank())) {
      TrainingPosition position;
      std::vector<torch::Tensor> outer;
      if (auto s = committed_->snapshot.Apply(model_.get(), optimizer_.get(), &position, &outer); !s.ok()) return s;
      auto serialized = SerializeTrainingState(model_.get(), optimizer_.get(), position, outer);
      if (!serialized.ok()) return serialized.status();
      files = std::move(*serialized);
    }
    if (auto s = BroadcastFiles(comm_.get(), *source, &files); !s.ok()) return s;
    if (auto s = RestoreFiles(files); !s.ok()) return s;
    LOG(INFO) << "generation " << join_.generation() << ": healed from rank " << *source << "'s commit in memory at step "
              << step_ << " (epoch " << epoch_ << ", " << position_ << " samples into it)";
    return absl::OkStatus();
  }
  // Nobody holds a commit: every rank starts from rank 0's parameters,
  // whatever its own init did, then from the newest checkpoint if any.
  if (auto s = BroadcastParameters(comm_.get(), params_, 0); !s.ok()) return s;
  step_ = 0;
  epoch_ = 0;
  position_ = 0;
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
  if (auto s = RestoreTrainingState(files, model_.get(), optimizer_.get(), &position, &outer_state); !s.ok()) return s;
  // The outer optimizer (parameter averaging) resumes with its momentum.
  if (averaging_ != nullptr && !outer_state.empty()) {
    if (auto s = averaging_->RestoreOuterState(outer_state); !s.ok()) return s;
  }
  step_ = position.step;
  epoch_ = position.epoch;
  position_ = position.samples_in_epoch;
  return absl::OkStatus();
}

absl::Status Trainer::Commit() {
  if (committed_ == nullptr) return absl::OkStatus();
  // Marked invalid first: a failed capture must not leave a mix of two commits.
  committed_->generation = -1;
  if (auto s = committed_->snapshot.Capture(
          model_.get(), optimizer_.get(), TrainingPosition{step_, epoch_, position_},
          averaging_ != nullptr ? averaging_->OuterState() : std::vector<torch::Tensor>{});
      !s.ok()) {
    return s;
  }
  committed_->generation = join_.generation();
  committed_->step = step_;
  return absl::OkStatus();
}

// Steps left from the current position at this generation's world size.
int64_t Trainer::TotalSteps() const {
  const int64_t per_step = join_.world_size() * spec_.batch_size() * spec_.grad_accumulation();
  int64_t total = 0;
  if (spec_.epochs() > 0 && epoch_ < spec_.epochs()) {
    total = step_ + CeilDiv(train_->size() - position_, per_step) +
            (spec_.epochs() - epoch_ - 1) * CeilDiv(train_->size(), per_step);
  } else if (spec_.epochs() > 0) {
    total = step_;
  }
  if (spec_.max_steps() > 0) total = total > 0 ? std::min(total, spec_.max_steps()) : spec_.max_steps();
  return total;
}

bool Trainer::Done() const {
  if (spec_.max_steps() > 0 && step_ >= spec_.max_steps()) return true;
  if (spec_.epochs() > 0 && epoch_ >= spec_.epochs()) return true;
  return false;
}

void Trainer::ZeroGrads() {
  // Undefined rather than zero: the next backward allocates fresh gradients
  // instead of accumulating into last step's bucket views.
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

absl::Status Trainer::TrainStep() {
  const int world = static_cast<int>(join_.world_size());
  const int rank = static_cast<int>(join_.rank());
  const int64_t b = spec_.batch_size();
  const int64_t n = train_->size();
  const int64_t step_budget = std::min<int64_t>(world * b * spec_.grad_accumulation(), n - position_);

  // A step's micro-batches each take the next world*b samples of the epoch.
  std::vector<StepSlice> micros;
  int64_t global = 0;
  while (global < step_budget && static_cast<int64_t>(micros.size()) < spec_.grad_accumulation()) {
    micros.push_back(sampler_->Slice(epoch_, position_ + global, world, rank, b));
    global += micros.back().global_count;
  }

  // Mode average after warmup: no gradient sync, each rank steps on the
  // mean loss of its own samples, and rounds average the parameters.
  const bool local = LocalStep();
  int64_t mine = 0;
  for (const auto& micro : micros) mine += static_cast<int64_t>(micro.indices.size());
  if (ledger_ != nullptr) {
    std::vector<int64_t> ids;
    for (const auto& micro : micros) ids.insert(ids.end(), micro.indices.begin(), micro.indices.end());
    ledger_->Step(join_.generation(), step_, epoch_, ids);
  }
  const auto step_start = std::chrono::steady_clock::now();
  const int64_t wire_bytes_before = traffic_.wire_bytes;
  const int64_t rounds_before = traffic_.averaging_rounds;
  StepTimer timer;  // for metrics: a few clock reads per micro-batch
  StepStats stats;
  ZeroGrads();
  for (size_t m = 0; m < micros.size(); ++m) {
    if (m + 1 == micros.size() && !local) sync_->ArmForBackward();
    const auto& indices = micros[m].indices;
    if (indices.empty()) continue;  // a short last step leaves some ranks idle
    Batch batch = train_->Get(indices);
    if (device_.is_cuda()) {
      // Pinned host memory lets the copy run asynchronously to the GPU.
      batch.inputs = batch.inputs.pin_memory().to(device_, /*non_blocking=*/true);
      batch.targets = batch.targets.pin_memory().to(device_, /*non_blocking=*/true);
    }
    timer.Lap();  // loading the batch is neither forward nor backward
    ModelOutput out = [&] {
      CudaBf16Autocast autocast(spec_.bf16_autocast() && device_.is_cuda());
      return model_->Forward(batch);
    }();
    stats.forward_seconds += timer.Lap();
    // Scaled so that summing gradients over ranks yields the global-batch
    // mean; a local step takes the mean over this rank's samples instead.
    const double share = static_cast<double>(indices.size()) / static_cast<double>(local ? mine : global);
    (out.loss * share).backward();
    stats.backward_seconds += timer.Lap();
    stats.local_samples += static_cast<int64_t>(indices.size());
    loss_sum_ += out.loss.item<double>() * static_cast<double>(indices.size());
    loss_count_ += static_cast<int64_t>(indices.size());
  }
  if (auto s = local ? absl::OkStatus() : sync_->Finish(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("gradient all-reduce at step ", step_, ": ", s.message()));
  }
  timer.Lap();  // GradientSync measures its own wait
  if (spec_.grad_clip_norm() > 0) torch::nn::utils::clip_grad_norm_(params_, spec_.grad_clip_norm());
  SetLearningRate(optimizer_.get(),
                  LearningRateAt(spec_.schedule(), spec_.optimizer().lr(), step_, std::max<int64_t>(1, total_steps_)));
  optimizer_->step();
  stats.optimizer_seconds = timer.Lap();
  stats.step_seconds = timer.Total();
  traffic_.samples += mine;
  if (local) {
    ++traffic_.local_steps;
    ++local_steps_since_round_;
  } else {
    ++traffic_.allreduce_steps;
    traffic_.wire_bytes += sync_->last_stats().wire_bytes;
    traffic_.allreduce_wait_seconds += sync_->last_stats().exposed_wait_seconds;
    // Replicas are identical after an all-reduce step: averaging (after
    // warmup) starts from here.
    if (averaging_ != nullptr) averaging_->ResetAnchor();
  }
  replicas_in_sync_ = !local;

  samples_since_report_ += global;
  position_ += global;
  ++step_;
  if (local && AveragingDue()) {
    if (auto s = AverageRound(); !s.ok()) return s;
  }
  traffic_.train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  if (position_ >= n) {
    ++epoch_;
    position_ = 0;
    if (auto s = RunEval(); !s.ok()) return s;
  }
  if (metrics_ != nullptr) {
    // A local step leaves last_stats() at the last all-reduce step's values.
    const GradientSyncStats sync = local ? GradientSyncStats{} : sync_->last_stats();
    const bool averaged = traffic_.averaging_rounds > rounds_before;
    stats.allreduce_wait_seconds = sync.exposed_wait_seconds + (averaged ? traffic_.last_round_seconds : 0);
    stats.allreduce_bytes = traffic_.wire_bytes - wire_bytes_before;
    stats.buckets_launched_during_backward = sync.launched_during_backward;
    stats.step = step_;
    stats.epoch = epoch_;
    metrics_->ObserveStep(stats);
    metrics_->ObserveSyncTraffic(traffic_);
  }
  return absl::OkStatus();
}

bool Trainer::LocalStep() const { return averaging_ != nullptr && step_ >= spec_.sync().warmup_steps(); }

// Mode average: a round after `every` local steps, and wherever replicas must
// agree: before an evaluation (epoch end, eval interval), at a checkpoint step
// and at the last step, so evaluations, checkpoints and the final bitwise
// check see the averaged model.
bool Trainer::AveragingDue() const {
  if (local_steps_since_round_ >= spec_.sync().every()) return true;
  if (position_ >= train_->size()) return true;
  const int64_t eval_interval = spec_.eval().interval_steps();
  if (eval_interval > 0 && step_ % eval_interval == 0) return true;
  const int64_t checkpoint_interval = spec_.checkpoint().interval_steps();
  if (checkpoint_interval > 0 && step_ % checkpoint_interval == 0) return true;
  return Done();
}

absl::Status Trainer::AverageRound() {
  if (auto s = averaging_->Round(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("parameter averaging at step ", step_, ": ", s.message()));
  }
  const AveragingRoundStats& round = averaging_->last_round();
  traffic_.wire_bytes += round.wire_bytes;
  ++traffic_.averaging_rounds;
  traffic_.last_round_seconds = round.seconds;
  traffic_.last_round_interval_seconds = round.interval_seconds;
  local_steps_since_round_ = 0;
  replicas_in_sync_ = true;
  VLOG(1) << absl::StrFormat("averaging round %d at step %d: %d bytes, %.4f s, %.3f s since the previous round",
                             traffic_.averaging_rounds, step_, round.wire_bytes, round.seconds, round.interval_seconds);
  return absl::OkStatus();
}

// Commits (replica hash check, progress report, checkpoint) need identical
// replicas: in mode average they fall on the first round at least
// log_interval_steps after the previous commit, and on checkpoint steps.
bool Trainer::CommitDue() const {
  if (!replicas_in_sync_) return false;
  if (Done()) return true;
  const int64_t checkpoint_interval = spec_.checkpoint().interval_steps();
  if (LocalStep()) {
    return step_ - last_commit_step_ >= spec_.log_interval_steps() ||
           (checkpoint_interval > 0 && step_ % checkpoint_interval == 0);
  }
  return step_ % spec_.log_interval_steps() == 0;
}

void Trainer::LogSyncTraffic() const {
  const SyncTraffic& t = traffic_;
  const std::string rate = absl::StrFormat("%d samples in %.1f s of training (%.1f samples/s)", t.samples,
                                           t.train_seconds, t.SamplesPerSecond());
  if (averaging_ != nullptr) {
    LOG(INFO) << absl::StrFormat("averaging: %d rounds, %d bytes sent (%.1f bytes/sample); %d local steps, "
                                 "%d all-reduce steps, %s",
                                 t.averaging_rounds, t.wire_bytes, t.BytesPerSample(), t.local_steps,
                                 t.allreduce_steps, rate);
  } else {
    LOG(INFO) << absl::StrFormat("all-reduce: %d steps, %d bytes sent (%.1f bytes/sample); %s; waited %.1f s "
                                 "(%.1f%%) for the all-reduce after backward",
                                 t.allreduce_steps, t.wire_bytes, t.BytesPerSample(), rate, t.allreduce_wait_seconds,
                                 t.train_seconds > 0 ? 100 * t.allreduce_wait_seconds / t.train_seconds : 0.0);
  }
}

absl::Status Trainer::RunEval() {
  EvalOptions options;
  options.max_samples = spec_.eval().max_samples();
  auto metrics = Evaluate(model_.get(), *eval_, comm_.get(), options);
  if (!metrics.ok()) return metrics.status();
  eval_metrics_ = *metrics;
  if (metrics_ != nullptr) metrics_->SetEval(eval_metrics_);
  if (join_.rank() == 0) {
    std::string line = absl::StrFormat("eval at step %d (epoch %d):", step_, epoch_);
    for (const auto& [name, value] : eval_metrics_) absl::StrAppendFormat(&line, " %s %.4f", name, value);
    LOG(INFO) << line;
  }
  return absl::OkStatus();
}

absl::Status Trainer::CommitPoint(bool final) {
  // Replicas must agree at every commit point; a mismatch fails loudly.
  if (auto s = CompareReplicaHashes(comm_.get(), ParameterHash(params_), step_); !s.ok()) return s;
  last_commit_step_ = step_;
  // Held in memory: what the next generation heals from if this one fails.
  if (auto s = Commit(); !s.ok()) return s;
  const int64_t interval = spec_.checkpoint().interval_steps();
  if (interval > 0 && step_ % interval == 0 && step_ != last_checkpoint_step_ && join_.rank() == 0) {
    if (auto s = SaveCheckpoint(); !s.ok()) return s;
  }

  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_report_time_).count();
  // A report with no steps since the last one (the final report after
  // evaluation) keeps the last measured throughput.
  if (samples_since_report_ > 0 && seconds > 0) {
    samples_per_second_ = static_cast<double>(samples_since_report_) / seconds;
  }
  const double samples_per_second = samples_per_second_;
  if (loss_count_ > 0) last_loss_ = loss_sum_ / static_cast<double>(loss_count_);
  if (metrics_ != nullptr) metrics_->SetLoss(last_loss_);
  loss_sum_ = 0;
  loss_count_ = 0;
  samples_since_report_ = 0;
  last_report_time_ = now;

  v1::ReportProgressRequest report;
  report.set_job_id(client_->options().job_id);
  report.set_generation(join_.generation());
  report.set_rank(join_.rank());
  report.set_step(step_);
  report.set_epoch(epoch_);
  report.set_samples_in_epoch(position_);
  report.set_samples_per_second(samples_per_second);
  report.set_loss(last_loss_);
  report.set_total_steps(total_steps_);
  for (const auto& [name, value] : eval_metrics_) (*report.mutable_eval())[name] = value;
  if (join_.rank() == 0) {
    LOG(INFO) << absl::StrFormat("step %d/%d epoch %d loss %.4f %.0f samples/s%s", step_, total_steps_, epoch_,
                                 last_loss_, samples_per_second, final ? " (final)" : "");
  }
  auto response = client_->ReportProgress(report);
  if (!response.ok() && response.status().code() == absl::StatusCode::kFailedPrecondition) {
    // Fenced: a newer generation exists (a worker joined or a peer failed).
    return absl::FailedPreconditionError(absl::StrCat("generation ", join_.generation(),
                                                      " was superseded: ", response.status().message()));
  }
  if (!response.ok()) {
    // The data path does not need the coordinator: keep training through an
    // outage and report again at the next commit point.
    LOG(WARNING) << "progress report failed (training continues): " << response.status();
    return absl::OkStatus();
  }
  if (response->cancelled()) return absl::CancelledError("the job was cancelled");
  return absl::OkStatus();
}

absl::Status Trainer::SaveFinalModel() {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(options_.work_dir) / kFinalModelFile;
  const fs::path tmp = path.string() + ".tmp";
  torch::serialize::OutputArchive archive;
  for (const auto& [name, tensor] : model_->NamedParameters()) archive.write(name, tensor.detach().to(torch::kCPU));
  archive.save_to(tmp.string());
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot write ", path.string(), ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status Trainer::Run() {
  try {
    if (auto s = Setup(); !s.ok()) return s;
    last_report_time_ = std::chrono::steady_clock::now();
    const int64_t eval_interval = spec_.eval().interval_steps();
    while (!Done()) {
      MarkAlive();
      if (auto s = TrainStep(); !s.ok()) return s;
      if (eval_interval > 0 && step_ % eval_interval == 0 && position_ != 0) {
        if (auto s = RunEval(); !s.ok()) return s;
      }
      // The last step is a commit point too, so its report (and log line)
      // marks the end of training before the final evaluation starts.
      if (CommitDue()) {
        if (auto s = CommitPoint(false); !s.ok()) return s;
      }
    }
    if (eval_metrics_.empty() || position_ != 0) {
      if (auto s = RunEval(); !s.ok()) return s;
    }
    if (auto s = VerifyReplicasBitwise(comm_.get(), params_); !s.ok()) return s;
    LOG(INFO) << "replicas verified bitwise across " << join_.world_size() << " ranks (all-gather of all parameters)";
    LogSyncTraffic();
    if (auto s = SaveFinalModel(); !s.ok()) return s;
    return CommitPoint(true);
  } catch (const c10::Error& e) {
    return TorchError(absl::StrCat("training step ", step_).c_str(), e);
  } catch (const std::exception& e) {
    return TorchError(absl::StrCat("training step ", step_).c_str(), e);
  }
}

}  // namespace herd

namespace herd {

absl::Status Trainer::SaveCheckpoint() {
  auto files = SerializeTrainingState(model_.get(), optimizer_.get(), TrainingPosition{step_, epoch_, position_},
                                      averaging_ != nullptr ? averaging_->OuterState() : std::vector<torch::Tensor>{});
  if (!files.ok()) return files.status();
  auto folder = WriteCheckpointFolder(options_.checkpoint_root, client_->options().job_id, step_, *files);
  if (!folder.ok()) return folder.status();
  last_checkpoint_step_ = step_;
  // Recorded only now that it is complete on disk.
  v1::CommitCheckpointRequest request;
  request.set_job_id(client_->options().job_id);
  request.set_generation(join_.generation());
  request.set_step(step_);
  request.set_epoch(epoch_);
  request.set_samples_in_epoch(position_);
  request.set_path(folder->relative_path);
  request.set_size_bytes(folder->size_bytes);
  request.set_sha256(folder->manifest_sha256);
  auto committed = client_->CommitCheckpoint(request);
  if (!committed.ok()) {
    // Not fatal: the files stay, the catalog misses one entry.
    LOG(WARNING) << "checkpoint at step " << step_ << " written but not recorded: " << committed.status();
    return absl::OkStatus();
  }
  for (const auto& old : committed->delete_paths()) {
    if (auto s = DeleteCheckpointFolder(options_.checkpoint_root, old); !s.ok()) LOG(WARNING) << s;
  }
  if (metrics_ != nullptr) metrics_->SetLastCheckpoint(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  LOG(INFO) << "checkpoint " << committed->checkpoint().id() << " at step " << step_ << " (" << folder->size_bytes
            << " bytes) in " << folder->relative_path;
  return absl::OkStatus();
}

absl::Status Trainer::RestoreFromCheckpoint() {
  // The catalog's newest first, then older ones on disk: a corrupt or
  // truncated checkpoint is skipped for the previous complete one.
  std::vector<std::string> candidates = {join_.checkpoint_path()};
  for (const auto& folder : ListCheckpointFolders(options_.checkpoint_root, client_->options().job_id)) {
    if (folder.relative_path != join_.checkpoint_path()) candidates.push_back(folder.relative_path);
  }
  for (const auto& path : candidates) {
    auto files = ReadCheckpointFolder(options_.checkpoint_root, path);
    if (!files.ok()) {
      LOG(WARNING) << "skipping checkpoint " << path << ": " << files.status();
      continue;
    }
    if (absl::Status restored = RestoreFiles(*files); !restored.ok()) {
      LOG(WARNING) << "skipping checkpoint " << path << ": " << restored;
      continue;
    }
    last_checkpoint_step_ = step_;
    LOG(INFO) << "resumed from checkpoint " << path << " at step " << step_ << " (epoch " << epoch_ << ", "
              << position_ << " samples into it)";
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat("no usable checkpoint for job ", client_->options().job_id, " under ",
                                          options_.checkpoint_root, " (tried ", candidates.size(), ")"));
}

}  // namespace herd
