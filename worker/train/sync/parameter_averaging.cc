#include "worker/train/sync/parameter_averaging.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/train/sync/int8_wire.h"
#include "worker/train/sync/sync_buckets.h"

namespace herd {
namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The flattened parameters (registration order) cut into `fragments`
// contiguous ranges of about equal size; a parameter may span two.
std::vector<std::vector<ParameterPiece>> SplitIntoFragments(const std::vector<torch::Tensor>& params, int fragments) {
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  std::vector<std::vector<ParameterPiece>> out(fragments);
  int64_t at = 0;  // flat position of params[i]'s first element
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    const int64_t n = params[i].numel();
    for (int f = 0; f < fragments; ++f) {
      const int64_t begin = std::max(at, f * total / fragments);
      const int64_t end = std::min(at + n, (f + 1) * total / fragments);
      if (begin < end) out[f].push_back(ParameterPiece{i, begin - at, end - begin});
    }
    at += n;
  }
  return out;
}

// A round's side payload as a float tensor on `device`, where it joins the
// round's own buffer (CUDA with NCCL).
torch::Tensor SideOn(const std::vector<float>& side, torch::Device device) {
  return torch::from_blob(const_cast<float*>(side.data()), {static_cast<int64_t>(side.size())}, torch::kFloat)
      .to(device);
}

// Every rank's side payload from `rows` (float32, one row per rank), in
// rank order: a few floats, read once the exchange is done.
std::vector<float> ReadSide(const torch::Tensor& rows) {
  const torch::Tensor host = rows.contiguous().cpu();
  return std::vector<float>(host.data_ptr<float>(), host.data_ptr<float>() + host.numel());
}

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
  int64_t total = 0;
  for (const auto& p : params) {
    total += p.numel();
  }
  if (options.fragments < 1 || options.fragments > total) {
    return absl::InvalidArgumentError(absl::StrCat("sync.fragments: ", options.fragments,
                                                   " fragments need between 1 and as many parameter elements (",
                                                   total, ")"));
  }
  if (options.int8_wire && Int8Levels(comm->size()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.compression: int8 supports up to 127 ranks, this generation has ", comm->size()));
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
      wire_type_(options_.int8_wire ? DataType::kUInt8 : options_.wire_type),
      int8_levels_(options_.int8_wire ? Int8Levels(comm_->size()) : 0) {
  BuildFragments();
  ResetAnchor();
}

void ParameterAveraging::BuildFragments() {
  for (const auto& members : SplitIntoFragments(params_, options_.fragments)) {
    Fragment& fragment = fragments_.emplace_back();
    std::vector<torch::Tensor> views;
    const int first = static_cast<int>(pieces_.size());
    for (const auto& piece : members) {
      pieces_.push_back(piece);
      views.push_back(ReadPiece(static_cast<int>(pieces_.size()) - 1));
    }
    // The gradient buckets' layout within the fragment (with one fragment,
    // the pieces are the parameters), so the same sync.* sizes mean the
    // same messages in both modes.
    const BucketLayout layout =
        PlanBuckets(views, options_.first_bucket_mib, options_.bucket_cap_mib, /*only_requiring_grad=*/false);
    for (const auto& bucket_members : layout.buckets) {
      Bucket& bucket = fragment.buckets.emplace_back();
      int64_t elements = 0;
      for (int k : bucket_members) {
        bucket.params.push_back(first + k);
        bucket.offsets.push_back(layout.slots[k].offset);
        elements += views[k].numel();
      }
      auto flat = params_[pieces_[bucket.params.front()].param].options().requires_grad(false);
      bucket.anchor = torch::empty({elements}, flat);
      bucket.delta = torch::empty({elements}, flat);
      if (outer_.kind == OuterKind::kNesterov) bucket.momentum = torch::zeros({elements}, flat);
      if (wire_type_ != DataType::kFloat32) bucket.wire = torch::empty({elements}, flat.dtype(TorchType(wire_type_)));
      if (options_.int8_wire) bucket.residual = torch::zeros({elements}, flat);
    }
  }
}

torch::Tensor ParameterAveraging::ReadPiece(int piece) const {
  const ParameterPiece& p = pieces_[piece];
  const torch::Tensor param = params_[p.param].detach();
  // A view of the parameter's current storage where it is contiguous; a
  // copy in row-major order otherwise.
  if (param.is_contiguous()) return param.view({-1}).narrow(0, p.start, p.numel);
  return param.reshape({-1}).narrow(0, p.start, p.numel).clone();
}

void ParameterAveraging::WritePiece(int piece, const torch::Tensor& values) {
  const ParameterPiece& p = pieces_[piece];
  torch::Tensor param = params_[p.param].detach();
  if (param.is_contiguous()) {
    param.view({-1}).narrow(0, p.start, p.numel).copy_(values);
  } else if (p.numel == param.numel()) {
    param.copy_(values.view(param.sizes()));
  } else {
    // put_ indexes the tensor as if flattened row-major, whatever its strides.
    param.put_(torch::arange(p.start, p.start + p.numel, torch::dtype(torch::kLong).device(param.device())), values);
  }
}

ParameterAveraging::~ParameterAveraging() {
  // The communicator may still be writing into the buckets of a round in
  // flight (a failed generation): wait (bounded by its timeout) before they go.
  for (auto& fragment : fragments_) {
    if (fragment.scales_work) fragment.scales_work->Wait().IgnoreError();
    for (auto& work : fragment.works) work->Wait().IgnoreError();
    if (fragment.side_work) fragment.side_work->Wait().IgnoreError();
  }
}

std::vector<ParameterAveraging::Bucket*> ParameterAveraging::AllBuckets() {
  std::vector<Bucket*> out;
  for (auto& fragment : fragments_) {
    for (auto& bucket : fragment.buckets) out.push_back(&bucket);
  }
  return out;
}

std::vector<const ParameterAveraging::Bucket*> ParameterAveraging::AllBuckets() const {
  std::vector<const Bucket*> out;
  for (const auto& fragment : fragments_) {
    for (const auto& bucket : fragment.buckets) out.push_back(&bucket);
  }
  return out;
}

std::vector<int64_t> ParameterAveraging::bucket_elements() const {
  std::vector<int64_t> out;
  for (const Bucket* bucket : AllBuckets()) out.push_back(bucket->anchor.numel());
  return out;
}

std::vector<std::vector<int>> ParameterAveraging::fragment_params() const {
  std::vector<std::vector<int>> out;
  for (const auto& fragment : fragments_) {
    auto& members = out.emplace_back();
    for (const auto& bucket : fragment.buckets) {
      for (int piece : bucket.params) members.push_back(pieces_[piece].param);
    }
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
  }
  return out;
}

void ParameterAveraging::ResetAnchor() {
  torch::NoGradGuard no_grad;
  for (Bucket* bucket : AllBuckets()) {
    for (size_t j = 0; j < bucket->params.size(); ++j) {
      const auto p = ReadPiece(bucket->params[j]);
      bucket->anchor.narrow(0, bucket->offsets[j], p.numel()).copy_(p);
    }
  }
  last_round_end_ = std::chrono::steady_clock::now();
}

void ParameterAveraging::StartScales(Fragment& fragment) {
  std::vector<torch::Tensor> maxima;
  for (auto& bucket : fragment.buckets) maxima.push_back(ChunkAbsMax(bucket.delta));
  // The side payload rides at the end of the scale exchange.
  if (!fragment.side_mine.empty()) {
    // On the maxima's device (CUDA with NCCL): the exchange is one buffer.
    maxima.push_back(SideOn(fragment.side_mine, maxima.front().device()));
  }
  fragment.scales_mine = torch::cat(maxima).contiguous();
  const int64_t chunks = fragment.scales_mine.numel();
  fragment.scales_all = torch::empty({comm_->size(), chunks}, fragment.scales_mine.options());
  fragment.scales_work = comm_->AllGatherAsync(fragment.scales_mine.data_ptr(), chunks * sizeof(float),
                                               fragment.scales_all.data_ptr());
  fragment.bytes += chunks * static_cast<int64_t>(sizeof(float));
}

absl::Status ParameterAveraging::FinishScales(Fragment& fragment) {
  std::shared_ptr<Work> work = std::move(fragment.scales_work);
  const auto wait_start = std::chrono::steady_clock::now();
  absl::Status waited = work->Wait();
  fragment.events.blocked_seconds += Seconds(std::chrono::steady_clock::now() - wait_start);
  fragment.events.has_scales = true;
  fragment.events.scales = work->times();
  if (!waited.ok()) return waited;
  const int64_t side = static_cast<int64_t>(fragment.side_mine.size());
  if (side > 0) {
    const int64_t columns = fragment.scales_all.size(1);
    // A few floats, read once the exchange is done (the wait above).
    fragment.side_all = ReadSide(fragment.scales_all.narrow(1, columns - side, side));
    fragment.scales_all = fragment.scales_all.narrow(1, 0, columns - side);
  }
  const auto shared = std::get<0>(fragment.scales_all.max(0));
  int64_t at = 0;
  for (auto& bucket : fragment.buckets) {
    const int64_t n = Int8Chunks(bucket.delta.numel());
    bucket.scale = shared.narrow(0, at, n).clone();
    at += n;
  }
  return absl::OkStatus();
}

void ParameterAveraging::SendBuckets(Fragment& fragment) {
  // Launch every bucket before waiting on any: the communicator runs them in
  // order while later buckets are still being filled.
  for (auto& bucket : fragment.buckets) {
    if (options_.int8_wire) {
      auto decoded = torch::empty_like(bucket.delta);
      Int8Encode(bucket.delta, bucket.scale, int8_levels_, bucket.wire, decoded);
      torch::sub_out(bucket.residual, bucket.delta, decoded);
    } else if (wire_type_ != DataType::kFloat32) {
      bucket.wire.copy_(bucket.delta);
    }
    torch::Tensor& send = wire_type_ == DataType::kFloat32 ? bucket.delta : bucket.wire;
    fragment.bytes += send.numel() * static_cast<int64_t>(DataTypeSize(wire_type_));
    fragment.works.push_back(comm_->AllReduceAsync(send.data_ptr(), static_cast<size_t>(send.numel()), wire_type_));
  }
  // Without a scale exchange the side payload follows the data: one hop,
  // after the round's own bytes.
  if (!options_.int8_wire && !fragment.side_mine.empty()) {
    const size_t bytes = fragment.side_mine.size() * sizeof(float);
    fragment.side_all.assign(fragment.side_mine.size() * static_cast<size_t>(comm_->size()), 0.0f);
    fragment.side_work = comm_->AllGatherAsync(fragment.side_mine.data(), bytes, fragment.side_all.data());
    fragment.bytes += static_cast<int64_t>(bytes);
  }
}

bool ParameterAveraging::SetRoundShape(RoundShape shape) {
  if (!options_.int8_wire) return shape == RoundShape::kAllReduce;
  shape_ = shape;
  return true;
}

void ParameterAveraging::GatherBuckets(Fragment& fragment) {
  // Each rank's own scales use every level: nothing is summed in int8.
  const int levels = Int8Levels(1);
  const int world = comm_->size();
  const int64_t side = static_cast<int64_t>(fragment.side_mine.size());
  bool first = true;
  for (auto& bucket : fragment.buckets) {
    const int64_t codes = bucket.delta.numel();
    const int64_t floats = Int8Chunks(codes) + (first ? side : 0);
    const int64_t padding = (4 - codes % 4) % 4;  // rows stay float-aligned
    const int64_t bytes = floats * 4 + codes + padding;
    if (!bucket.gather_mine.defined() || bucket.gather_mine.numel() != bytes) {
      bucket.gather_mine = torch::zeros({bytes}, bucket.wire.options());
      bucket.gather_all = torch::empty({world, bytes}, bucket.wire.options());
    }
    // The message in place: scales (and the side payload), then the codes.
    torch::Tensor head = bucket.gather_mine.narrow(0, 0, floats * 4).view(torch::kFloat);
    bucket.scale = ChunkAbsMax(bucket.delta);
    head.narrow(0, 0, bucket.scale.numel()).copy_(bucket.scale);
    if (first && side > 0) head.narrow(0, bucket.scale.numel(), side).copy_(SideOn(fragment.side_mine, head.device()));
    torch::Tensor code_view = bucket.gather_mine.narrow(0, floats * 4, codes);
    auto decoded = torch::empty_like(bucket.delta);
    Int8Encode(bucket.delta, bucket.scale, levels, code_view, decoded);
    torch::sub_out(bucket.residual, bucket.delta, decoded);
    fragment.bytes += bytes;
    fragment.works.push_back(comm_->AllGatherAsync(bucket.gather_mine.data_ptr(), static_cast<size_t>(bytes),
                                                   bucket.gather_all.data_ptr()));
    first = false;
  }
}

void ParameterAveraging::DecodeGathered(Fragment& fragment) {
  const int levels = Int8Levels(1);
  const int world = comm_->size();
  const int64_t side = static_cast<int64_t>(fragment.side_mine.size());
  bool first = true;
  for (auto& bucket : fragment.buckets) {
    const int64_t codes = bucket.delta.numel();
    const int64_t chunks = Int8Chunks(codes);
    const int64_t floats = chunks + (first ? side : 0);
    if (first && side > 0) {
      fragment.side_all = ReadSide(bucket.gather_all.narrow(1, chunks * 4, side * 4).contiguous().view(torch::kFloat));
    }
    // The mean of the decoded contributions, added in rank order.
    auto contribution = torch::empty_like(bucket.delta);
    bucket.delta.zero_();
    for (int r = 0; r < world; ++r) {
      const torch::Tensor row = bucket.gather_all[r];
      const torch::Tensor scale = row.narrow(0, 0, chunks * 4).view(torch::kFloat);
      Int8DecodeMean(row.narrow(0, floats * 4, codes), scale, levels, 1, contribution);
      bucket.delta.add_(contribution);
    }
    bucket.delta.div_(static_cast<double>(world));
    first = false;
  }
}

absl::Status ParameterAveraging::Launch(int index, bool keep_local_steps, double weight, bool overlap_scales,
                                        std::vector<float> side) {
  torch::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  Fragment& fragment = fragments_.at(index);
  if (std::find(launched_.begin(), launched_.end(), index) != launched_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("parameter averaging: fragment ", index,
                                                      " launched while its previous round is in flight"));
  }
  fragment.keep_local_steps = keep_local_steps;
  fragment.gathered = shape_ == RoundShape::kGather;
  fragment.works.clear();
  fragment.bytes = 0;
  fragment.events = RoundEvents{};
  fragment.events.launch_start = start;
  fragment.side_mine = std::move(side);
  fragment.side_all.clear();
  fragment.side_work.reset();
  for (auto& bucket : fragment.buckets) {
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      const auto p = ReadPiece(bucket.params[j]);
      const int64_t n = p.numel();
      auto out = bucket.delta.narrow(0, bucket.offsets[j], n);
      torch::sub_out(out, bucket.anchor.narrow(0, bucket.offsets[j], n), p);
    }
    // Weighted rounds (throughput shares): the sum over ranks of weight x
    // delta, divided by the world size in Merge, is the sample-weighted mean.
    if (weight != 1) bucket.delta.mul_(weight);
    if (keep_local_steps) {
      if (!bucket.sent.defined()) bucket.sent = torch::empty_like(bucket.anchor);
      for (size_t j = 0; j < bucket.params.size(); ++j) {
        const auto p = ReadPiece(bucket.params[j]);
        bucket.sent.narrow(0, bucket.offsets[j], p.numel()).copy_(p);
      }
    }
    // Error feedback: what earlier rounds' rounding left out goes out now.
    if (options_.int8_wire) bucket.delta.add_(bucket.residual);
  }
  launched_.push_back(index);
  absl::Status status = absl::OkStatus();
  if (fragment.gathered) {
    GatherBuckets(fragment);  // one hop: nothing to agree on first
  } else if (options_.int8_wire) {
    StartScales(fragment);
    if (!overlap_scales) {
      status = FinishScales(fragment);
      if (status.ok()) SendBuckets(fragment);
    }
  } else {
    SendBuckets(fragment);
  }
  fragment.events.launch_end = std::chrono::steady_clock::now();
  fragment.blocked_seconds = Seconds(fragment.events.launch_end - start);
  return status;
}

absl::Status ParameterAveraging::Advance(int count) {
  torch::NoGradGuard no_grad;
  const size_t n = count < 0 ? launched_.size() : std::min(launched_.size(), static_cast<size_t>(count));
  for (size_t i = 0; i < n; ++i) {
    Fragment& fragment = fragments_[launched_[i]];
    if (!fragment.scales_work) continue;
    const auto start = std::chrono::steady_clock::now();
    if (auto s = FinishScales(fragment); !s.ok()) return s;
    SendBuckets(fragment);
    fragment.blocked_seconds += Seconds(std::chrono::steady_clock::now() - start);
  }
  return absl::OkStatus();
}

absl::Status ParameterAveraging::Finish(int count) {
  torch::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  const size_t n = count < 0 ? launched_.size() : std::min(launched_.size(), static_cast<size_t>(count));
  // A round still exchanging its scales sends now: every rank finishes the
  // same rounds at the same boundary, so they all do.
  absl::Status status = Advance(static_cast<int>(n));
  int64_t bytes = 0;
  double blocked = 0;
  for (size_t i = 0; i < n; ++i) {
    Fragment& fragment = fragments_[launched_[i]];
    const auto wait_start = std::chrono::steady_clock::now();
    for (auto& work : fragment.works) {
      absl::Status s = work->Wait();
      if (!s.ok() && status.ok()) status = s;
      fragment.events.data.push_back(work->times());
    }
    if (fragment.side_work != nullptr) {
      absl::Status s = fragment.side_work->Wait();
      if (!s.ok() && status.ok()) status = s;
      fragment.side_work.reset();
    }
    fragment.events.blocked_seconds += Seconds(std::chrono::steady_clock::now() - wait_start);
    fragment.works.clear();
    bytes += fragment.bytes;
    blocked += fragment.blocked_seconds;
  }
  std::vector<int> done(launched_.begin(), launched_.begin() + static_cast<std::ptrdiff_t>(n));
  launched_.erase(launched_.begin(), launched_.begin() + static_cast<std::ptrdiff_t>(n));
  if (!status.ok()) return status;
  stats_.timelines.clear();
  stats_.side_payloads.clear();
  for (int index : done) {
    Fragment& fragment = fragments_[index];
    fragment.events.merge_start = std::chrono::steady_clock::now();
    Merge(fragment);
    fragment.events.merge_end = std::chrono::steady_clock::now();
    RoundTimeline timeline = BuildRoundTimeline(fragment.events);
    timeline.shape = fragment.gathered ? RoundShape::kGather : RoundShape::kAllReduce;
    stats_.timelines.push_back(timeline);
    stats_.side_payloads.push_back(std::move(fragment.side_all));
    fragment.side_all.clear();
  }
  const auto end = std::chrono::steady_clock::now();
  stats_.rounds += 1;
  stats_.wire_bytes = bytes;
  stats_.seconds = blocked + Seconds(end - start);
  stats_.interval_seconds = Seconds(end - last_round_end_);
  last_round_end_ = end;
  return absl::OkStatus();
}

void ParameterAveraging::Merge(Fragment& fragment) {
  // Every rank now holds the same sum and the same anchor, so the outer step
  // below produces bitwise-identical anchors everywhere.
  const int world = comm_->size();
  if (fragment.gathered) DecodeGathered(fragment);
  for (auto& bucket : fragment.buckets) {
    if (fragment.gathered) {
      // DecodeGathered left the mean in delta.
    } else if (options_.int8_wire) {
      Int8DecodeMean(bucket.wire, bucket.scale, int8_levels_, world, bucket.delta);
    } else {
      if (wire_type_ != DataType::kFloat32) bucket.delta.copy_(bucket.wire);
      bucket.delta.div_(static_cast<double>(world));
    }
    OuterStep(outer_, bucket.delta, bucket.anchor, bucket.momentum);
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      const int64_t n = pieces_[bucket.params[j]].numel;
      auto anchor = bucket.anchor.narrow(0, bucket.offsets[j], n);
      if (fragment.keep_local_steps) {
        // The steps taken while the round was in flight stay on top.
        WritePiece(bucket.params[j], ReadPiece(bucket.params[j]) - bucket.sent.narrow(0, bucket.offsets[j], n) + anchor);
      } else {
        WritePiece(bucket.params[j], anchor);
      }
    }
  }
}

absl::Status ParameterAveraging::Round(const std::vector<double>& weights) {
  if (in_flight()) return absl::FailedPreconditionError("parameter averaging: a full round with a round in flight");
  for (int f = 0; f < fragments(); ++f) {
    const double weight = static_cast<size_t>(f) < weights.size() ? weights[f] : 1.0;
    if (auto s = Launch(f, /*keep_local_steps=*/false, weight); !s.ok()) {
      Finish().IgnoreError();  // the communicator is broken; only lets the launched ones end
      return s;
    }
  }
  return Finish();
}

std::vector<torch::Tensor> ParameterAveraging::OuterState() const {
  std::vector<torch::Tensor> state;
  for (const Bucket* bucket : AllBuckets()) {
    if (bucket->momentum.defined()) state.push_back(bucket->momentum);
  }
  return state;
}

namespace {

absl::Status RestoreFlat(const char* what, const std::vector<torch::Tensor>& state, std::vector<torch::Tensor> mine) {
  if (state.size() != mine.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", state.size(), " tensors, expected ", mine.size()));
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    if (state[i].numel() != mine[i].numel()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " tensor ", i, " has ", state[i].numel(),
                                                     " elements, expected ", mine[i].numel()));
    }
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < mine.size(); ++i) mine[i].copy_(state[i].reshape({-1}));
  return absl::OkStatus();
}

}  // namespace

absl::Status ParameterAveraging::RestoreOuterState(const std::vector<torch::Tensor>& state) {
  return RestoreFlat("outer optimizer state", state, OuterState());
}

std::vector<torch::Tensor> ParameterAveraging::OuterStateByParameter() const {
  if (outer_.kind != OuterKind::kNesterov) return {};
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> state;
  for (const auto& p : params_) state.push_back(torch::empty({p.numel()}, p.options().requires_grad(false)));
  for (const Bucket* bucket : AllBuckets()) {
    for (size_t j = 0; j < bucket->params.size(); ++j) {
      const ParameterPiece& piece = pieces_[bucket->params[j]];
      state[piece.param].narrow(0, piece.start, piece.numel).copy_(
          bucket->momentum.narrow(0, bucket->offsets[j], piece.numel));
    }
  }
  return state;
}

absl::Status ParameterAveraging::RestoreOuterStateByParameter(const std::vector<torch::Tensor>& state) {
  const size_t expected = outer_.kind == OuterKind::kNesterov ? params_.size() : 0;
  if (state.size() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("outer optimizer state has ", state.size(), " parameter tensors, expected ", expected));
  }
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i].numel() != params_[i].numel()) {
      return absl::InvalidArgumentError(absl::StrCat("outer optimizer state of parameter ", i, " has ",
                                                     state[i].numel(), " elements, expected ", params_[i].numel()));
    }
  }
  torch::NoGradGuard no_grad;
  for (Bucket* bucket : AllBuckets()) {
    for (size_t j = 0; j < bucket->params.size(); ++j) {
      const ParameterPiece& piece = pieces_[bucket->params[j]];
      bucket->momentum.narrow(0, bucket->offsets[j], piece.numel)
          .copy_(state[piece.param].reshape({-1}).narrow(0, piece.start, piece.numel));
    }
  }
  return absl::OkStatus();
}

std::vector<torch::Tensor> ParameterAveraging::Residuals() const {
  std::vector<torch::Tensor> state;
  for (const Bucket* bucket : AllBuckets()) {
    if (bucket->residual.defined()) state.push_back(bucket->residual);
  }
  return state;
}

absl::Status ParameterAveraging::RestoreResiduals(const std::vector<torch::Tensor>& state) {
  if (state.empty()) {
    torch::NoGradGuard no_grad;
    for (auto& residual : Residuals()) residual.zero_();
    return absl::OkStatus();
  }
  return RestoreFlat("int8 residual state", state, Residuals());
}

}  // namespace herd
