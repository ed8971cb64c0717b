#include "worker/train/sync/gradient_sync.h"

#include <algorithm>

#include "worker/train/sync/sync_buckets.h"

namespace herd {

GradientSync::GradientSync(std::vector<torch::Tensor> params, Communicator* comm, GradientSyncOptions options)
    : params_(std::move(params)),
      comm_(comm),
      options_(std::move(options)),
      wire_type_(options_.wire_type),
      alone_(comm_->size() == 1) {
  slots_.resize(params_.size());
  filled_.assign(params_.size(), false);

  for (const auto& p : params_) {
    if (p.requires_grad()) TORCH_CHECK(p.scalar_type() == torch::kFloat, "gradient sync needs float32 parameters");
  }
  const BucketLayout layout =
      PlanBuckets(params_, options_.first_bucket_mib, options_.bucket_cap_mib, /*only_requiring_grad=*/true);
  for (size_t i = 0; i < params_.size(); ++i) {
    slots_[i] = Slot{layout.slots[i].bucket, layout.slots[i].offset, layout.slots[i].numel};
  }
  for (const auto& members : layout.buckets) buckets_.emplace_back().params = members;
  for (auto& bucket : buckets_) {
    int64_t elements = 0;
    for (int i : bucket.params) elements += slots_[i].numel;
    bucket.elements = elements;
    if (alone_) continue;  // no buffers, no hooks: see Finish
    auto options = params_[bucket.params.front()].options().requires_grad(false);
    bucket.flat = BucketBuffer(elements, options);
    if (wire_type_ != DataType::kFloat32) bucket.wire = torch::zeros({elements}, options.dtype(TorchType(wire_type_)));
  }
  if (options_.reduce_scatter) PlanPieces();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (alone_ || !params_[i].requires_grad()) continue;
    const int index = static_cast<int>(i);
    hook_handles_.push_back(params_[i].register_hook([this, index](torch::Tensor grad) {
      OnGradient(index, grad);
      return grad;
    }));
  }
}

void GradientSync::PlanPieces() {
  int64_t flat = 0;
  for (const Bucket& bucket : buckets_) {
    const RangeLayout layout = comm_->ReduceScatterLayout(static_cast<size_t>(bucket.elements), wire_type_);
    for (int rank = 0; rank < static_cast<int>(layout.size()); ++rank) {
      for (const ElementRange& range : layout[static_cast<size_t>(rank)]) {
        const auto begin = static_cast<int64_t>(range.begin), end = static_cast<int64_t>(range.end);
        for (int i : bucket.params) {
          const Slot& slot = slots_[i];
          const int64_t from = std::max(begin, slot.offset), to = std::min(end, slot.offset + slot.numel);
          if (from >= to) continue;
          pieces_.push_back(ShardPiece{static_cast<size_t>(i), rank, from - slot.offset, to - from, flat + from});
        }
      }
    }
    flat += bucket.elements;
  }
}

// Uncompressed buckets live in memory the communicator can sum in place
// when it offers some (shared memory for ranks on one host): the gradients
// are then never staged through a second buffer.
torch::Tensor GradientSync::BucketBuffer(int64_t elements, const torch::TensorOptions& options) {
  if (wire_type_ == DataType::kFloat32 && options.device().is_cpu()) {
    std::shared_ptr<void> memory = comm_->AllocateAllReduceBuffer(static_cast<size_t>(elements) * sizeof(float));
    if (memory != nullptr) {
      in_place_buckets_++;
      // The deleter holds the memory for as long as any view of it (a .grad) lives.
      return torch::from_blob(memory.get(), {elements}, [memory](void*) {}, options).zero_();
    }
  }
  return torch::zeros({elements}, options);
}

GradientSync::~GradientSync() {
  size_t h = 0;
  for (size_t i = 0; i < params_.size() && !alone_; ++i) {
    if (params_[i].requires_grad()) params_[i].remove_hook(hook_handles_[h++]);
  }
  // A bucket still in flight references our buffers: let it finish first.
  for (auto& bucket : buckets_) {
    if (bucket.work) bucket.work->Wait().IgnoreError();
  }
}

std::vector<int64_t> GradientSync::bucket_elements() const {
  std::vector<int64_t> out;
  for (const auto& bucket : buckets_) out.push_back(bucket.elements);
  return out;
}

double GradientSync::SecondsSinceArm() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - armed_at_).count();
}

void GradientSync::ArmForBackward() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = true;
  next_launch_ = 0;
  std::fill(filled_.begin(), filled_.end(), false);
  for (auto& bucket : buckets_) {
    bucket.pending = static_cast<int>(bucket.params.size());
    bucket.ready = false;
    bucket.work.reset();
  }
  stats_ = GradientSyncStats{};
  stats_.buckets = static_cast<int>(buckets_.size());
  armed_at_ = std::chrono::steady_clock::now();
}

void GradientSync::FillSlot(int param_index, const torch::Tensor* incoming) {
  const Slot& slot = slots_[param_index];
  auto out = buckets_[slot.bucket].flat.narrow(0, slot.offset, slot.numel);
  const auto& accumulated = params_[param_index].grad();
  if (incoming != nullptr && accumulated.defined()) {
    // Earlier micro-batches of this step left their sum in .grad.
    torch::add_out(out, accumulated.reshape({-1}), incoming->reshape({-1}));
  } else if (incoming != nullptr) {
    out.copy_(incoming->reshape({-1}));
  } else if (accumulated.defined()) {
    out.copy_(accumulated.reshape({-1}));
  } else {
    out.zero_();
  }
  filled_[param_index] = true;
  if (--buckets_[slot.bucket].pending == 0) buckets_[slot.bucket].ready = true;
}

void GradientSync::OnGradient(int param_index, const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!armed_ || filled_[param_index]) return;
  torch::NoGradGuard no_grad;
  FillSlot(param_index, &grad);
  const int before = static_cast<int>(next_launch_);
  LaunchReadyBucketsLocked();
  stats_.launched_during_backward += static_cast<int>(next_launch_) - before;
}

void GradientSync::LaunchReadyBucketsLocked() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready) {
    if (stats_.first_launch_seconds < 0) stats_.first_launch_seconds = SecondsSinceArm();
    Launch(buckets_[next_launch_]);
    ++next_launch_;
  }
}

void GradientSync::Launch(Bucket& bucket) {
  torch::Tensor& send = wire_type_ == DataType::kFloat32 ? bucket.flat : bucket.wire;
  if (wire_type_ != DataType::kFloat32) bucket.wire.copy_(bucket.flat);
  const int64_t bytes = send.numel() * static_cast<int64_t>(DataTypeSize(wire_type_));
  if (options_.reduce_scatter) {
    stats_.wire_bytes += bytes / 2;
    bucket.work = comm_->ReduceScatterInPlaceAsync(send.data_ptr(), static_cast<size_t>(send.numel()), wire_type_);
  } else {
    stats_.wire_bytes += bytes;
    bucket.work = comm_->AllReduceAsync(send.data_ptr(), static_cast<size_t>(send.numel()), wire_type_);
  }
}

absl::Status GradientSync::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!armed_) return absl::InternalError("GradientSync::Finish without ArmForBackward");
  stats_.backward_seconds = SecondsSinceArm();
  armed_ = false;
  torch::NoGradGuard no_grad;
  if (alone_) {
    // The sum over one rank is its own gradient: autograd's .grad already
    // holds it (micro-batches accumulated there). A parameter backward did
    // not reach gets zeros, as its bucket slot would have held.
    for (auto& p : params_) {
      if (p.requires_grad() && !p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    }
    stats_.buckets = 0;
    return absl::OkStatus();
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].requires_grad() && !filled_[i]) FillSlot(static_cast<int>(i), nullptr);
  }
  LaunchReadyBucketsLocked();
  lock.unlock();

  const auto wait_start = std::chrono::steady_clock::now();
  absl::Status status = absl::OkStatus();
  for (auto& bucket : buckets_) {
    absl::Status s = bucket.work->Wait();
    if (!s.ok() && status.ok()) status = s;
  }
  stats_.exposed_wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  if (!status.ok()) return status;

  for (auto& bucket : buckets_) {
    if (wire_type_ != DataType::kFloat32) bucket.flat.copy_(bucket.wire);
    for (int i : bucket.params) {
      const Slot& slot = slots_[i];
      // The synchronized gradient is a view into the bucket: no copy back
      // (reduce-scatter mode: summed only in this rank's pieces).
      params_[i].mutable_grad() = bucket.flat.narrow(0, slot.offset, slot.numel).view(params_[i].sizes());
    }
  }
  return absl::OkStatus();
}

}  // namespace herd
