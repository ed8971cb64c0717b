#include "worker/train/parameter_averaging.h"

#include "absl/strings/str_cat.h"
#include "worker/train/sync_buckets.h"

namespace herd {
namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void OuterStep(const OuterStepConfig& config, const torch::Tensor& pseudo_grad, torch::Tensor& anchor,
               torch::Tensor& momentum) {
  torch::NoGradGuard no_grad;
  if (config.kind == OuterKind::kNone) {
    anchor.sub_(pseudo_grad);
    return;
  }
  momentum.mul_(config.momentum).add_(pseudo_grad);
  // Nesterov: step along the gradient plus the momentum it will have next.
  anchor.sub_(pseudo_grad.add(momentum, config.momentum), config.lr);
}

absl::StatusOr<std::unique_ptr<ParameterAveraging>> ParameterAveraging::Create(std::vector<torch::Tensor> params,
                                                                              Communicator* comm,
                                                                              ParameterAveragingOptions options) {
  if (options.first_bucket_mib <= 0 || options.bucket_cap_mib <= 0) {
    return absl::InvalidArgumentError("sync bucket sizes must be > 0");
  }
  for (const auto& p : params) {
    if (p.scalar_type() != torch::kFloat) return absl::InvalidArgumentError("parameter averaging needs float32 parameters");
  }
  return std::unique_ptr<ParameterAveraging>(
      new ParameterAveraging(std::move(params), comm, std::move(options)));
}

ParameterAveraging::ParameterAveraging(std::vector<torch::Tensor> params, Communicator* comm,
                                       ParameterAveragingOptions options)
    : params_(std::move(params)),
      comm_(comm),
      options_(std::move(options)),
      outer_(options_.outer),
      wire_type_(options_.wire_type) {
  // The gradient buckets' layout, so the same sync.* sizes mean the same
  // messages in both modes.
  const BucketLayout layout =
      PlanBuckets(params_, options_.first_bucket_mib, options_.bucket_cap_mib, /*only_requiring_grad=*/false);
  for (const auto& members : layout.buckets) {
    Bucket& bucket = buckets_.emplace_back();
    bucket.params = members;
    for (int i : members) bucket.offsets.push_back(layout.slots[i].offset);
  }
  for (auto& bucket : buckets_) {
    int64_t elements = 0;
    for (int i : bucket.params) elements += params_[i].numel();
    auto flat = params_[bucket.params.front()].options().requires_grad(false);
    bucket.anchor = torch::empty({elements}, flat);
    bucket.delta = torch::empty({elements}, flat);
    if (outer_.kind == OuterKind::kNesterov) bucket.momentum = torch::zeros({elements}, flat);
    if (wire_type_ != DataType::kFloat32) bucket.wire = torch::empty({elements}, flat.dtype(TorchType(wire_type_)));
  }
  ResetAnchor();
}

ParameterAveraging::~ParameterAveraging() = default;

std::vector<int64_t> ParameterAveraging::bucket_elements() const {
  std::vector<int64_t> out;
  for (const auto& bucket : buckets_) out.push_back(bucket.anchor.numel());
  return out;
}

void ParameterAveraging::ResetAnchor() {
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      const auto& p = params_[bucket.params[j]];
      bucket.anchor.narrow(0, bucket.offsets[j], p.numel()).copy_(p.detach().reshape({-1}));
    }
  }
  last_round_end_ = std::chrono::steady_clock::now();
}

absl::Status ParameterAveraging::Round() {
  torch::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  int64_t wire_bytes = 0;
  std::vector<std::shared_ptr<Work>> works;
  works.reserve(buckets_.size());
  // Launch every bucket before waiting on any: the communicator runs them in
  // order while later buckets are still being filled.
  for (auto& bucket : buckets_) {
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      const auto& p = params_[bucket.params[j]];
      const int64_t n = p.numel();
      auto out = bucket.delta.narrow(0, bucket.offsets[j], n);
      torch::sub_out(out, bucket.anchor.narrow(0, bucket.offsets[j], n), p.detach().reshape({-1}));
    }
    torch::Tensor& send = wire_type_ == DataType::kFloat32 ? bucket.delta : bucket.wire;
    if (wire_type_ != DataType::kFloat32) bucket.wire.copy_(bucket.delta);
    wire_bytes += send.numel() * static_cast<int64_t>(DataTypeSize(wire_type_));
    works.push_back(comm_->AllReduceAsync(send.data_ptr(), static_cast<size_t>(send.numel()), wire_type_));
  }
  absl::Status status = absl::OkStatus();
  for (auto& work : works) {
    absl::Status s = work->Wait();
    if (!s.ok() && status.ok()) status = s;
  }
  if (!status.ok()) return status;

  // Every rank now holds the same sum and the same anchor, so the outer step
  // below produces bitwise-identical parameters everywhere.
  const double world = static_cast<double>(comm_->size());
  for (auto& bucket : buckets_) {
    if (wire_type_ != DataType::kFloat32) bucket.delta.copy_(bucket.wire);
    bucket.delta.div_(world);
    OuterStep(outer_, bucket.delta, bucket.anchor, bucket.momentum);
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      auto& p = params_[bucket.params[j]];
      p.detach().copy_(bucket.anchor.narrow(0, bucket.offsets[j], p.numel()).view(p.sizes()));
    }
  }
  const auto end = std::chrono::steady_clock::now();
  stats_.rounds += 1;
  stats_.wire_bytes = wire_bytes;
  stats_.seconds = Seconds(end - start);
  stats_.interval_seconds = Seconds(end - last_round_end_);
  last_round_end_ = end;
  return absl::OkStatus();
}

std::vector<torch::Tensor> ParameterAveraging::OuterState() const {
  std::vector<torch::Tensor> state;
  for (const auto& bucket : buckets_) {
    if (bucket.momentum.defined()) state.push_back(bucket.momentum);
  }
  return state;
}

absl::Status ParameterAveraging::RestoreOuterState(const std::vector<torch::Tensor>& state) {
  std::vector<torch::Tensor> mine = OuterState();
  if (state.size() != mine.size()) {
    return absl::InvalidArgumentError(absl::StrCat("outer optimizer state has ", state.size(), " tensors, expected ",
                                                   mine.size()));
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    if (state[i].numel() != mine[i].numel()) {
      return absl::InvalidArgumentError(absl::StrCat("outer optimizer state tensor ", i, " has ", state[i].numel(),
                                                     " elements, expected ", mine[i].numel()));
    }
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < mine.size(); ++i) mine[i].copy_(state[i].reshape({-1}));
  return absl::OkStatus();
}

}  // namespace herd
