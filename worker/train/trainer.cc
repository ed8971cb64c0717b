#include "worker/train/trainer.h"

#include <glog/logging.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/train/evaluator.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/optimizer_factory.h"
#include "worker/train/replicas.h"

namespace herd {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status TorchError(const char* what, const std::exception& e) {
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

}  // namespace

Trainer::Trainer(ClusterClient* client, v1::JoinGenerationResponse join, TrainerOptions options)
    : client_(client),
      join_(std::move(join)),
      spec_(join_.spec()),
      options_(std::move(options)),
      device_(options_.device == "cuda" ? torch::Device(torch::kCUDA, std::max(0, options_.gpu))
                                        : torch::Device(torch::kCPU)) {}

Trainer::~Trainer() = default;

absl::Status Trainer::Setup() {
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

  GlooOptions gloo;
  gloo.rank = static_cast<int>(join_.rank());
  gloo.size = static_cast<int>(join_.world_size());
  gloo.host = join_.peers(join_.rank()).address();
  gloo.timeout = options_.collective_timeout;
  gloo.key_prefix = "gloo/";
  auto comm = CreateGlooCommunicator(gloo, client_->KvStore(join_.generation()));
  if (!comm.ok()) return comm.status();
  comm_ = std::move(*comm);

  // Every rank starts from rank 0's parameters, whatever its own init did.
  if (auto s = BroadcastParameters(comm_.get(), params_, 0); !s.ok()) return s;

  GradientSyncOptions sync;
  sync.first_bucket_mib = spec_.sync().first_bucket_mib();
  sync.bucket_cap_mib = spec_.sync().bucket_cap_mib();
  sync.compression = spec_.sync().compression();
  sync_ = std::make_unique<GradientSync>(params_, comm_.get(), sync);

  auto optimizer = MakeOptimizer(spec_.optimizer(), params_);
  if (!optimizer.ok()) return optimizer.status();
  optimizer_ = std::move(*optimizer);

  sampler_ = std::make_unique<EpochSampler>(train_->size(), join_.seed());
  step_ = join_.start_step();
  epoch_ = join_.epoch();
  position_ = join_.samples_in_epoch();

  const int64_t per_step = join_.world_size() * spec_.batch_size() * spec_.grad_accumulation();
  const int64_t steps_per_epoch = CeilDiv(train_->size(), per_step);
  total_steps_ = spec_.epochs() > 0 ? spec_.epochs() * steps_per_epoch : 0;
  if (spec_.max_steps() > 0) total_steps_ = total_steps_ > 0 ? std::min(total_steps_, spec_.max_steps()) : spec_.max_steps();
  LOG(INFO) << "rank " << join_.rank() << "/" << join_.world_size() << " generation " << join_.generation()
            << ": " << spec_.model().name() << " with " << FlattenParameters(params_).numel() << " parameters, "
            << train_->size() << " training samples, " << steps_per_epoch << " steps per epoch, "
            << sync_->bucket_elements().size() << " gradient buckets";
  return absl::OkStatus();
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

  ZeroGrads();
  for (size_t m = 0; m < micros.size(); ++m) {
    if (m + 1 == micros.size()) sync_->ArmForBackward();
    const auto& indices = micros[m].indices;
    if (indices.empty()) continue;  // a short last step leaves some ranks idle
    Batch batch = train_->Get(indices);
    batch.inputs = batch.inputs.to(device_, /*non_blocking=*/true);
    batch.targets = batch.targets.to(device_, /*non_blocking=*/true);
    ModelOutput out = model_->Forward(batch);
    // Scaled so that summing gradients over ranks yields the global-batch mean.
    const double share = static_cast<double>(indices.size()) / static_cast<double>(global);
    (out.loss * share).backward();
    loss_sum_ += out.loss.item<double>() * static_cast<double>(indices.size());
    loss_count_ += static_cast<int64_t>(indices.size());
  }
  if (auto s = sync_->Finish(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("gradient all-reduce at step ", step_, ": ", s.message()));
  }
  if (spec_.grad_clip_norm() > 0) torch::nn::utils::clip_grad_norm_(params_, spec_.grad_clip_norm());
  SetLearningRate(optimizer_.get(),
                  LearningRateAt(spec_.schedule(), spec_.optimizer().lr(), step_, std::max<int64_t>(1, total_steps_)));
  optimizer_->step();

  samples_since_report_ += global;
  position_ += global;
  ++step_;
  if (position_ >= n) {
    ++epoch_;
    position_ = 0;
    if (auto s = RunEval(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Trainer::RunEval() {
  EvalOptions options;
  options.max_samples = spec_.eval().max_samples();
  auto metrics = Evaluate(model_.get(), *eval_, comm_.get(), options);
  if (!metrics.ok()) return metrics.status();
  eval_metrics_ = *metrics;
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

  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_report_time_).count();
  const double samples_per_second = seconds > 0 ? static_cast<double>(samples_since_report_) / seconds : 0;
  if (loss_count_ > 0) last_loss_ = loss_sum_ / static_cast<double>(loss_count_);
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
      if (auto s = TrainStep(); !s.ok()) return s;
      if (eval_interval > 0 && step_ % eval_interval == 0 && position_ != 0) {
        if (auto s = RunEval(); !s.ok()) return s;
      }
      if (step_ % spec_.log_interval_steps() == 0 && !Done()) {
        if (auto s = CommitPoint(false); !s.ok()) return s;
      }
    }
    if (eval_metrics_.empty() || position_ != 0) {
      if (auto s = RunEval(); !s.ok()) return s;
    }
    if (auto s = VerifyReplicasBitwise(comm_.get(), params_); !s.ok()) return s;
    LOG(INFO) << "replicas verified bitwise across " << join_.world_size() << " ranks (all-gather of all parameters)";
    if (auto s = SaveFinalModel(); !s.ok()) return s;
    return CommitPoint(true);
  } catch (const c10::Error& e) {
    return TorchError(absl::StrCat("training step ", step_).c_str(), e);
  } catch (const std::exception& e) {
    return TorchError(absl::StrCat("training step ", step_).c_str(), e);
  }
}

}  // namespace herd
