#include "worker/train/trainer.h"

#include <glog/logging.h>

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "worker/train/checkpoint/final_model.h"
#include "worker/train/generation/liveness.h"
#include "worker/train/optim/optimizer_factory.h"
#include "worker/train/report/straggler.h"
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
          [](const std::string& line) { LOG(WARNING) << line; }) {}

Trainer::~Trainer() {
  // The sum goes with this generation's communicators.
  if (replica_sum_ != nullptr) ctx_.model()->SetReplicaSum(nullptr);
}

GenerationResult Trainer::Run() {
  absl::Status status = TrainGeneration();
  if (status.ok() && boundary_.has_value()) return *boundary_;
  return GenerationResult::Of(std::move(status));
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
      bool epoch_end = false;
      if (auto s = step_->Run(last_commit_step_, &epoch_end); !s.ok()) return s;
      running_step_ = 0;
      // With the "step N/T" line of the last step, this line's time bounds
      // the wall time of training as a user sees it (bench/wan_bench.py).
      if (pos_.step == first_step) LOG(INFO) << "step " << pos_.step << ": the generation's first step is done";
      const bool eval_due = eval_interval > 0 && pos_.step % eval_interval == 0 && pos_.samples_in_epoch != 0;
      if (epoch_end || eval_due) {
        if (auto s = RunEval(); !s.ok()) return s;
      }
      // The last step is a commit point too, so its report (and log line)
      // marks the end of training before the final evaluation starts.
      if (sync_->CommitDue(BoundaryAt(spec_, pos_, last_commit_step_), last_commit_step_,
                           spec_.log_interval_steps())) {
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
  PlanGeneration(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  step_capture_.StartGeneration(CaptureEnvironmentNow(), join_.generation());
  return absl::OkStatus();
}

Communicator* Trainer::Marked(Communicator* inner) {
  if (waiting_marker_ == nullptr || inner == nullptr) return inner;
  for (const auto& [of, marked] : marked_) {
    if (of == inner) return marked.get();
  }
  marked_.emplace_back(inner, MarkWaitsOf(inner, waiting_marker_.get()));
  return marked_.back().second.get();
}

absl::Status Trainer::ConnectGroup() {
  if (PostsWaitingMarks(ctx_.device().is_cuda(), static_cast<int>(join_.world_size()))) {
    std::function<void()> on_mark;
    if (ctx_.metrics() != nullptr) on_mark = [metrics = ctx_.metrics()] { metrics->ObserveLongWait(); };
    waiting_marker_ = std::make_unique<WaitingMarker>(client_->KvStore(join_.generation()),
                                                      static_cast<int>(join_.rank()),
                                                      WaitingMarkAfter(ctx_.CollectiveTimeout()), std::move(on_mark));
  }
  // Forming the communicators waits on the peers too; the wait ends as a
  // failure unless they formed (an exception too).
  const uint64_t forming = waiting_marker_ != nullptr ? waiting_marker_->Begin() : 0;
  bool formed = false;
  auto end_forming = absl::MakeCleanup([&] {
    if (waiting_marker_ != nullptr) waiting_marker_->End(forming, formed);
  });
  auto group = make_communicators_(join_, ctx_, client_);
  formed = group.ok();
  std::move(end_forming).Invoke();
  if (!group.ok()) return group.status();
  group_ = std::move(*group);
  comm_ = Marked(group_.control.get());
  Communicator* data = Marked(group_.data);
  replica_sum_ = std::make_unique<CommunicatorReplicaSum>(data, ctx_.options().compute_mutex);
  collective_forward_ = ctx_.model()->SetReplicaSum(replica_sum_.get());
  std::optional<IslandComms> islands;
  if (group_.islands.has_value()) {
    islands = IslandComms{&*group_.islands, Marked(group_.island->data),
                          group_.cross != nullptr ? Marked(group_.cross->data) : nullptr};
    const IslandLayout& layout = *group_.islands;
    LOG(INFO) << "island " << layout.values[static_cast<size_t>(layout.island)] << " (" << layout.my_island().size()
              << " ranks) over " << group_.island->data->backend() << ", position " << layout.position << ", "
              << (group_.cross != nullptr ? absl::StrCat("cross group of ", layout.cross.size(), " ranks over ",
                                                         group_.cross->data->backend())
                                          : std::string("no shard (its island is larger than the smallest)"));
  }
  auto sync = CreateSyncStrategy(ctx_.sync(), ctx_.params(), data, islands ? &*islands : nullptr);
  if (!sync.ok()) return sync.status();
  sync_ = std::move(*sync);
  LOG(INFO) << sync_->Describe();
  return absl::OkStatus();
}

void Trainer::PlanGeneration(double setup_seconds) {
  const int64_t per_step = SamplesPerStep(spec_, join_.world_size());
  const int64_t epoch_size = ctx_.train_set().size();
  // A fixed global batch with islands is split equally among the islands,
  // so an island that lost a member keeps its batch (IslandShares).
  std::vector<int> island_of;
  if (spec_.global_batch_size() > 0 && group_.islands.has_value()) island_of = group_.islands->island_of;
  feed_ = std::make_unique<BatchFeed>(BatchFeedOptions{
      &ctx_.train_set(), &ctx_.sampler(), ctx_.prefetcher(), ctx_.ledger(), ctx_.metrics(), ctx_.device(),
      static_cast<int>(join_.rank()), static_cast<int>(join_.world_size()), join_.generation(), per_step,
      spec_.batch_size(), spec_.max_steps(), spec_.epochs(), collective_forward_, ctx_.sync().throughput_shares,
      std::move(island_of)});
  total_steps_ = LastStepFrom(pos_, epoch_size, per_step, spec_.epochs(), spec_.max_steps());
  // optimizer.scale_lr follows this generation's world size.
  const LearningRatePlan lr_plan = PlanLearningRate(spec_.optimizer(), join_.world_size());
  step_ = std::make_unique<TrainingStep>(
      &ctx_, StepSetup{sync_.get(), feed_.get(), replica_sum_.get(), collective_forward_, lr_plan, total_steps_,
                       /*first_step=*/pos_.step + 1, &step_capture_, join_.generation()});
  if (ctx_.metrics() != nullptr) {
    ctx_.metrics()->SetMembership(join_.world_size(), join_.generation());
    ctx_.metrics()->ObserveReform(setup_seconds);
  }
  LOG(INFO) << "rank " << join_.rank() << "/" << join_.world_size() << " generation " << join_.generation()
            << " ready in " << absl::StrFormat("%.3f", setup_seconds) << " s (no reload): "
            << lr_plan.Describe(spec_.optimizer(), join_.world_size()) << ", " << (epoch_size + per_step - 1) / per_step
            << " steps per epoch, " << sync_->BucketSummary() << " over " << group_.data->backend();
}

absl::Status Trainer::Finish() {
  if (book_.eval().empty() || pos_.samples_in_epoch != 0) {
    if (auto s = RunEval(); !s.ok()) return s;
  }
  // model-final.pt holds the buffers too: the same on every rank.
  if (auto s = AgreeOnBuffers(); !s.ok()) return s;
  if (auto s = VerifyReplicasBitwise(comm_, ctx_.params()); !s.ok()) return s;
  LOG(INFO) << "replicas verified bitwise across " << join_.world_size()
            << " ranks (a 64-bit hash of each parameter tensor)";
  LOG(INFO) << sync_->TrafficSummary(ctx_.traffic());
  if (auto s = SaveFinalModel(); !s.ok()) return s;
  return CommitPoint(true);
}

absl::Status Trainer::CommitPoint(bool final) {
  // First, so the device's stop event follows the interval's last step, not the commit's own work.
  book_.ObserveStepTimes(step_->CloseTimes(), join_.rank(), pos_.step);
  if (auto s = AgreeOnBuffers(); !s.ok()) return s;
  CommitFacts facts;
  if (auto s = AgreeAtCommit(&facts); !s.ok()) return s;
  last_commit_step_ = pos_.step;
  if (auto s = manager_->Commit(final); !s.ok()) return s;
  if (auto s = book_.CloseWindow(final, &ctx_.host_reads(), ctx_.traffic()); !s.ok()) return s;
  facts.final = final;
  if (final) facts.final_model = final_model_files_;
  return ReportAndVote(std::move(facts));
}

absl::Status Trainer::AgreeAtCommit(CommitFacts* facts) {
  // Replicas must agree at every commit point; a mismatch fails loudly. The
  // same all-gather carries each rank's step times of the log interval for
  // straggler detection and throughput shares: no extra collective.
  std::vector<torch::Tensor> replica_state = ctx_.params();
  for (auto& buffer : ctx_.model()->Buffers()) replica_state.push_back(std::move(buffer));
  const ProgressWindow& window = book_.window();
  auto times = manager_->Agree(replica_state, {window.compute_seconds, window.wait_seconds, window.steps});
  if (!times.ok()) return times.status();
  if (times->empty()) return absl::OkStatus();
  facts->straggler = FindStraggler(*times);
  if (join_.rank() == 0) {
    LOG(INFO) << "step " << pos_.step << ": compute/wait per step and samples per step of each rank since the "
              << "last commit: " << DescribeStepTimes(*times, feed_->shares());
  }
  facts->interval_shares = feed_->shares();  // the shares the interval ran on
  feed_->Replan(*times, pos_.step);
  facts->rank_times = *std::move(times);
  return absl::OkStatus();
}

absl::Status Trainer::ReportAndVote(CommitFacts facts) {
  facts.job_id = ctx_.options().job_id;
  facts.generation = join_.generation();
  facts.rank = join_.rank();
  facts.position = pos_;
  facts.total_steps = total_steps_;
  facts.sync = sync_->Status();
  facts.checkpoint_warning = ctx_.checkpoints().Warning();
  facts.shares = feed_->shares();
  v1::ReportProgressRequest report = book_.MakeReport(facts);
  // Sent off the step loop: a slow or stalled coordinator never holds training up.
  if (ctx_.reporter() != nullptr) ctx_.reporter()->PostProgress(std::move(report));
  // The job's last commit point needs no vote: training ends there anyway.
  // A trainer that cannot be asked to leave takes no vote: every rank of a
  // job runs the same herd-trainer, which always can (trainer_main), so the
  // ranks agree; in-process tests without it keep their collective sequence.
  if (!facts.final && !Done() && ctx_.options().leave_request) {
    auto end = manager_->Vote();
    if (!end.ok()) return end.status();
    boundary_ = *end;
    if (boundary_.has_value()) return absl::OkStatus();
  }
  return manager_->Verdict();
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
  book_.SetEval(*std::move(metrics), join_.rank(), pos_);
  return absl::OkStatus();
}

absl::Status Trainer::SaveFinalModel() {
  // state_dict order: parameters, then buffers.
  std::vector<std::pair<std::string, torch::Tensor>> tensors = ctx_.model()->NamedParameters();
  for (auto& named : ctx_.model()->NamedBuffers()) tensors.push_back(std::move(named));
  auto written = WriteFinalModel(
      ctx_.options().work_dir, tensors,
      {{"format", "pt"}, {"herd_model", ctx_.model()->name()}, {"herd_config", ctx_.model()->Config()}});
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

bool Trainer::Done() const { return DoneAt(pos_, spec_.max_steps(), spec_.epochs()); }

CaptureEnvironment Trainer::CaptureEnvironmentNow() const {
  CaptureEnvironment env;
  env.cuda_device = ctx_.device().is_cuda();
  env.graphs_built = CudaGraphsBuilt();
  env.torchscript_model = spec_.model().name() == "torchscript";
  env.fused_optimizer = HasFusedStep(spec_.optimizer().name(), /*amsgrad=*/false);
  env.world_size = join_.world_size();
  env.nccl_backend = group_.data != nullptr && group_.data == group_.nccl.get();
  env.local_steps = spec_.sync().mode() == v1::SYNC_MODE_AVERAGE;
  env.skip_step = ctx_.on_nonfinite() == NonFinitePolicy::kSkipStep;
  const int64_t rank_batches = join_.world_size() * spec_.batch_size();
  const int64_t micro_batches = (SamplesPerStep(spec_, join_.world_size()) + rank_batches - 1) / rank_batches;
  env.step_free_of_host_sync =
      StepFreeOfHostSync(join_.world_size(), micro_batches, collective_forward_, ctx_.sync().shard_optimizer);
  return env;
}

}  // namespace herd
