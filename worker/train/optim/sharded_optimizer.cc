#include "worker/train/optim/sharded_optimizer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/train/optim/grad_clip.h"
#include "worker/train/step/torch_compat.h"  // OptimizerStateKey

namespace herd {
namespace {

using torch::optim::OptimizerParamState;

int64_t Bytes(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

// Ranges index the elements in logical (row-major) order, whatever the
// memory layout (mnist_cnn's conv weights are channels-last): parameters,
// gradients and state tensors may differ in strides.
// Elements [offset, offset + length) of `t`: a view where `t` is contiguous.
torch::Tensor ReadFlat(const torch::Tensor& t, int64_t offset, int64_t length) {
  return t.reshape({-1}).narrow(0, offset, length);
}

void WriteFlat(const torch::Tensor& t, int64_t offset, int64_t length, const torch::Tensor& values) {
  if (t.is_contiguous()) {
    t.view({-1}).narrow(0, offset, length).copy_(values);
  } else {
    t.put_(torch::arange(offset, offset + length, torch::TensorOptions().dtype(torch::kLong).device(t.device())),
           values);
  }
}

// Elements [offset, offset + length) of `t`, in memory of their own.
torch::Tensor Cut(const torch::Tensor& t, int64_t offset, int64_t length) {
  return t.defined() ? ReadFlat(t, offset, length).clone() : t;
}

// What a sharded optimizer keeps per parameter: one parameter group (the
// step swaps its parameters for the pieces) of an optimizer optimizer_state.h
// describes.
absl::StatusOr<OptimizerStateSpec> ShardableSpec(torch::optim::Optimizer& optimizer) {
  if (optimizer.param_groups().size() != 1) {
    return absl::UnimplementedError("sync.shard_optimizer: the optimizer must have exactly one parameter group");
  }
  auto spec = StateSpecOf(optimizer.param_groups().front().options());
  if (!spec.ok()) return absl::UnimplementedError(absl::StrCat("sync.shard_optimizer: ", spec.status().message()));
  return spec;
}

// -1 without state, else the step count (0 for SGD, which keeps none).
absl::StatusOr<int64_t> StepOf(torch::optim::Optimizer& optimizer, const torch::Tensor& key) {
  auto found = optimizer.state().find(OptimizerStateKey(key));
  if (found == optimizer.state().end() || found->second == nullptr) return -1;
  auto state = ReadParamState(*found->second);
  if (!state.ok()) return state.status();
  return state->step;
}

// Restores the parameter group's parameters when the step is over, thrown or not.
class SwappedParams {
 public:
  SwappedParams(std::vector<torch::Tensor>* group, std::vector<torch::Tensor> with) : group_(group) {
    saved_ = std::move(*group_);
    *group_ = std::move(with);
  }
  ~SwappedParams() { *group_ = std::move(saved_); }
  SwappedParams(const SwappedParams&) = delete;
  SwappedParams& operator=(const SwappedParams&) = delete;

 private:
  std::vector<torch::Tensor>* group_;
  std::vector<torch::Tensor> saved_;
};

}  // namespace

std::vector<int64_t> FlatShardBounds(int64_t total_elements, int world) {
  const int64_t w = std::max(world, 1);
  std::vector<int64_t> bounds(static_cast<size_t>(w) + 1);
  for (int64_t r = 0; r <= w; ++r) bounds[static_cast<size_t>(r)] = total_elements * r / w;
  return bounds;
}

std::vector<ShardPiece> ShardPieces(const std::vector<int64_t>& numels, int world) {
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  const std::vector<int64_t> bounds = FlatShardBounds(total, world);
  std::vector<ShardPiece> pieces;
  int64_t flat = 0;
  int rank = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    const int64_t end = flat + numels[i];
    for (int64_t at = flat; at < end;) {
      while (bounds[static_cast<size_t>(rank) + 1] <= at) ++rank;
      const int64_t stop = std::min(end, bounds[static_cast<size_t>(rank) + 1]);
      pieces.push_back(ShardPiece{i, rank, at - flat, stop - at, at});
      at = stop;
    }
    flat = end;
  }
  return pieces;
}

absl::StatusOr<std::unique_ptr<OptimizerShards>> OptimizerShards::Create(std::vector<torch::Tensor> params,
                                                                         Communicator* comm) {
  std::vector<int64_t> numels;
  for (const auto& p : params) numels.push_back(p.numel());
  return Create(std::move(params), comm, ShardPieces(numels, comm->size()));
}

absl::StatusOr<std::unique_ptr<OptimizerShards>> OptimizerShards::Create(std::vector<torch::Tensor> params,
                                                                         Communicator* comm,
                                                                         std::vector<ShardPiece> pieces) {
  for (const auto& p : params) {
    if (p.dtype() != params.front().dtype() || p.device() != params.front().device()) {
      return absl::InvalidArgumentError(
          "sync.shard_optimizer: the model's parameters must share one dtype and device");
    }
  }
  // Every parameter covered exactly once, or not at all.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> spans(params.size());
  for (const ShardPiece& piece : pieces) {
    if (piece.param >= params.size() || piece.rank < 0 || piece.rank >= comm->size() || piece.length <= 0 ||
        piece.offset < 0 || piece.offset + piece.length > params[piece.param].numel()) {
      return absl::InvalidArgumentError(absl::StrCat("sync.shard_optimizer: piece of parameter ", piece.param,
                                                     " [", piece.offset, ", +", piece.length, ") on rank ",
                                                     piece.rank, " is out of range"));
    }
    spans[piece.param].emplace_back(piece.offset, piece.offset + piece.length);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (spans[i].empty()) {
      if (params[i].numel() > 0) pieces.push_back(ShardPiece{i, 0, 0, params[i].numel(), 0});
      continue;
    }
    std::sort(spans[i].begin(), spans[i].end());
    int64_t at = 0;  // covered up to here, or -1 at a gap or an overlap
    for (const auto& [begin, end] : spans[i]) at = begin == at ? end : -1;
    if (at != params[i].numel()) {
      return absl::InvalidArgumentError(absl::StrCat("sync.shard_optimizer: the pieces of parameter ", i,
                                                     " overlap or leave part of it out"));
    }
  }
  return std::unique_ptr<OptimizerShards>(new OptimizerShards(std::move(params), comm, std::move(pieces)));
}

OptimizerShards::OptimizerShards(std::vector<torch::Tensor> params, Communicator* comm, std::vector<ShardPiece> pieces)
    : params_(std::move(params)), comm_(comm), pieces_(std::move(pieces)) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params_) total_bytes_ += Bytes(p);
  rank_elements_.assign(static_cast<size_t>(comm_->size()), 0);
  for (const ShardPiece& piece : pieces_) {
    int64_t& filled = rank_elements_[static_cast<size_t>(piece.rank)];
    packed_.push_back(filled);
    filled += piece.length;
    if (piece.rank != comm_->rank()) continue;
    own_.push_back(piece);
    own_packed_.push_back(packed_.back());
    // A piece covering its whole parameter is the parameter: nothing to copy.
    own_tensors_.push_back(Whole(piece) ? params_[piece.param] : ReadParam(piece).clone().requires_grad_(true));
    if (Whole(piece)) whole_params_.insert(piece.param);
    owned_bytes_ += piece.length * static_cast<int64_t>(params_[piece.param].element_size());
  }
  block_elements_ = *std::max_element(rank_elements_.begin(), rank_elements_.end());
  if (!params_.empty()) {
    const auto options = params_.front().options().requires_grad(false);
    send_ = torch::zeros({block_elements_}, options);
    gathered_ = torch::empty({block_elements_ * comm_->size()}, options);
  }
}

torch::Tensor OptimizerShards::ReadParam(const ShardPiece& piece) const {
  return ReadFlat(params_[piece.param].detach(), piece.offset, piece.length);
}

void OptimizerShards::WriteParam(const ShardPiece& piece, const torch::Tensor& values) const {
  WriteFlat(params_[piece.param].detach(), piece.offset, piece.length, values);
}

std::string OptimizerShards::Describe() const {
  const int rank = comm_->rank();
  int64_t total = 0;
  for (int64_t n : rank_elements_) total += n;
  return absl::StrFormat(
      "optimizer state sharded over %d ranks (ZeRO-1): rank %d owns %d of %d elements in %d piece(s) of %d "
      "parameter tensors, %d of %d bytes",
      comm_->size(), rank, rank_elements_[static_cast<size_t>(rank)], total, own_.size(), params_.size(),
      owned_bytes_, total_bytes_);
}

void OptimizerShards::DropForeignState(torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  auto& state = optimizer.state();
  // Entries of another OptimizerShards' pieces (an earlier generation's) are
  // dropped, and so are this one's when a restore replaced the state.
  std::set<OptimizerStateKeyType> keep;
  for (const auto& p : params_) keep.insert(OptimizerStateKey(p));
  if (pieces_hold_state_) {
    for (const auto& t : own_tensors_) keep.insert(OptimizerStateKey(t));
  }
  for (auto it = state.begin(); it != state.end();) {
    it = keep.count(it->first) > 0 ? std::next(it) : state.erase(it);
  }
  // Whole state, where there is any, is newer than the pieces'.
  for (size_t k = 0; k < own_.size(); ++k) {
    if (Whole(own_[k])) continue;
    const OptimizerStateKeyType piece_key = OptimizerStateKey(own_tensors_[k]);
    auto whole = state.find(OptimizerStateKey(params_[own_[k].param]));
    if (whole == state.end() || whole->second == nullptr) continue;
    auto whole_state = ReadParamState(*whole->second);
    if (!whole_state.ok()) continue;  // StepOwnRange and GatherState refuse such an optimizer
    // A piece's state: its elements of every tensor, the same step count.
    std::unique_ptr<OptimizerParamState> piece;
    WriteParamState(
        MapStateTensors(*whole_state, [&](const torch::Tensor& t) { return Cut(t, own_[k].offset, own_[k].length); }),
        &piece);
    state[piece_key] = std::move(piece);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (whole_params_.count(i) == 0) state.erase(OptimizerStateKey(params_[i]));
  }
  pieces_hold_state_ = true;
}

absl::Status OptimizerShards::StepOwnRange(torch::optim::Optimizer& optimizer) {
  if (auto spec = ShardableSpec(optimizer); !spec.ok()) return spec.status();
  DropForeignState(optimizer);
  {
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < own_.size(); ++k) {
      if (Whole(own_[k])) continue;  // steps the parameter with its own gradient
      own_tensors_[k].detach().copy_(ReadParam(own_[k]));
      const torch::Tensor& grad = params_[own_[k].param].grad();
      own_tensors_[k].mutable_grad() =
          grad.defined() ? ReadFlat(grad, own_[k].offset, own_[k].length) : torch::Tensor();
    }
  }
  {
    SwappedParams swapped(&optimizer.param_groups().front().params(), own_tensors_);
    optimizer.step();
  }
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < own_.size(); ++k) {
    if (Whole(own_[k])) continue;
    WriteParam(own_[k], own_tensors_[k].detach());
    own_tensors_[k].mutable_grad() = torch::Tensor();  // no hold on the gradient buckets
  }
  return absl::OkStatus();
}

absl::Status OptimizerShards::ShareParameters() {
  if (params_.empty()) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  const int rank = comm_->rank();
  if (comm_->size() == 1) return absl::OkStatus();
  for (size_t k = 0; k < own_.size(); ++k) {
    send_.narrow(0, own_packed_[k], own_[k].length).copy_(ReadParam(own_[k]));
  }
  const size_t block = static_cast<size_t>(block_elements_) * send_.element_size();
  if (auto s = comm_->AllGather(send_.data_ptr(), block, gathered_.data_ptr()); !s.ok()) return s;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const ShardPiece& piece = pieces_[k];
    if (piece.rank == rank) continue;
    WriteParam(piece, gathered_.narrow(0, piece.rank * block_elements_ + packed_[k], piece.length));
  }
  return absl::OkStatus();
}

int64_t OptimizerShards::share_wire_bytes() const {
  if (comm_->size() == 1 || params_.empty()) return 0;
  return block_elements_ * comm_->size() * static_cast<int64_t>(send_.element_size()) / 2;
}

absl::StatusOr<double> OptimizerShards::ClipGradNorm(double max_norm) {
  torch::NoGradGuard no_grad;
  // This rank's pieces of the summed gradients: views where the gradient is
  // contiguous (the gradient buckets' views are), copies written back else.
  std::vector<torch::Tensor> grads;
  std::vector<const ShardPiece*> copied;
  for (const ShardPiece& piece : own_) {
    const torch::Tensor& grad = params_[piece.param].grad();
    if (!grad.defined()) continue;
    grads.push_back(ReadFlat(grad, piece.offset, piece.length));
    copied.push_back(grad.is_contiguous() ? nullptr : &piece);
  }
  const auto device = params_.empty() ? torch::Device(torch::kCPU) : params_.front().device();
  // NCCL sums device memory: the scalar goes where the parameters are.
  torch::Tensor squares =
      torch::full({1}, SquaredNorm(grads), torch::TensorOptions().dtype(torch::kFloat64)).to(device);
  if (comm_->size() > 1) {
    if (auto s = comm_->AllReduce(squares.data_ptr(), 1, DataType::kFloat64); !s.ok()) return s;
  }
  const double norm = std::sqrt(squares.cpu().item<double>());
  ScaleGradients(grads, ClipScale(norm, max_norm));
  for (size_t k = 0; k < grads.size(); ++k) {
    if (copied[k] != nullptr) WriteFlat(params_[copied[k]->param].grad(), copied[k]->offset, copied[k]->length, grads[k]);
  }
  return norm;
}

absl::Status OptimizerShards::GatherState(torch::optim::Optimizer& optimizer) {
  auto spec = ShardableSpec(optimizer);
  if (!spec.ok()) return spec.status();
  if (params_.empty()) return absl::OkStatus();
  DropForeignState(optimizer);  // the pieces hold this rank's whole share now
  if (comm_->size() == 1) return absl::OkStatus();  // one rank: every piece is a whole parameter
  torch::NoGradGuard no_grad;
  auto steps = GatherSteps(optimizer);
  if (!steps.ok()) return steps.status();
  const StateBlocks blocks = PlanStateBlocks(*steps, spec->live_tensors);
  if (blocks.largest == 0) {
    pieces_hold_state_ = false;  // no state anywhere: none in pieces either
    return absl::OkStatus();
  }
  auto gathered = ExchangeStateBlocks(optimizer, *steps, *spec, blocks);
  if (!gathered.ok()) return gathered.status();
  // Only now, with everything received, is the whole state made and the
  // pieces' dropped: a failed gather leaves each rank with its own pieces.
  AssembleWholeState(optimizer, *steps, *spec, blocks, *gathered);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> OptimizerShards::GatherSteps(torch::optim::Optimizer& optimizer) const {
  // Per parameter, what this rank's pieces of it hold: -2 no piece, -1 no
  // state yet (none before the first step), else the step count (0 for
  // SGD). On the parameters' device: NCCL moves device memory only.
  const size_t n = params_.size();
  std::vector<int64_t> own_steps(n, -2);
  for (size_t k = 0; k < own_.size(); ++k) {
    auto step = StepOf(optimizer, own_tensors_[k]);
    if (!step.ok()) return step.status();
    own_steps[own_[k].param] = *step;
  }
  torch::Tensor mine =
      torch::from_blob(own_steps.data(), {static_cast<int64_t>(n)}, torch::kInt64).clone().to(params_.front().device());
  torch::Tensor everyone = torch::empty({static_cast<int64_t>(n) * comm_->size()}, mine.options());
  if (auto s = comm_->AllGather(mine.data_ptr(), n * sizeof(int64_t), everyone.data_ptr()); !s.ok()) return s;
  everyone = everyone.cpu();
  const int64_t* all = everyone.data_ptr<int64_t>();
  auto step_of = [&](const ShardPiece& piece) { return all[static_cast<size_t>(piece.rank) * n + piece.param]; };
  // A parameter's pieces step together (the gradient is the same on every
  // rank), so they agree; a disagreement must not become a commit.
  std::vector<int64_t> step(n, -1);
  std::vector<bool> seen(n, false);
  for (const ShardPiece& piece : pieces_) {
    if (seen[piece.param] && step[piece.param] != step_of(piece)) {
      return absl::InternalError(absl::StrCat("sync.shard_optimizer: the owners of parameter ", piece.param,
                                              " hold state at different steps (", step[piece.param], " and ",
                                              step_of(piece), ")"));
    }
    seen[piece.param] = true;
    step[piece.param] = step_of(piece);
  }
  return step;
}

OptimizerShards::StateBlocks OptimizerShards::PlanStateBlocks(const std::vector<int64_t>& steps,
                                                              size_t live_tensors) const {
  const int64_t world = comm_->size();
  StateBlocks blocks;
  blocks.elements.assign(static_cast<size_t>(world), 0);
  for (const ShardPiece& piece : pieces_) {
    if (steps[piece.param] >= 0) {
      blocks.elements[static_cast<size_t>(piece.rank)] += static_cast<int64_t>(live_tensors) * piece.length;
    }
  }
  blocks.largest = *std::max_element(blocks.elements.begin(), blocks.elements.end());
  const int64_t total = std::accumulate(blocks.elements.begin(), blocks.elements.end(), int64_t{0});
  blocks.all_gather = blocks.largest * world <= 2 * total;  // every rank decides alike
  blocks.buffer_elements = blocks.all_gather ? blocks.largest * world : total;
  blocks.start.assign(static_cast<size_t>(world), 0);
  for (size_t r = 1; r < blocks.start.size(); ++r) {
    blocks.start[r] = blocks.all_gather ? static_cast<int64_t>(r) * blocks.largest
                                        : blocks.start[r - 1] + blocks.elements[r - 1];
  }
  return blocks;
}

absl::Status OptimizerShards::PackOwnState(torch::optim::Optimizer& optimizer, const std::vector<int64_t>& steps,
                                          const OptimizerStateSpec& spec, const torch::Tensor& send) const {
  int64_t offset = 0;
  for (size_t k = 0; k < own_.size(); ++k) {
    if (steps[own_[k].param] < 0) continue;
    auto found = optimizer.state().find(OptimizerStateKey(own_tensors_[k]));
    if (found == optimizer.state().end() || found->second == nullptr) {
      return absl::InternalError(
          absl::StrCat("sync.shard_optimizer: this rank's piece of parameter ", own_[k].param, " has no state"));
    }
    auto state = ReadParamState(*found->second);
    if (!state.ok()) return state.status();
    for (size_t t = 0; t < spec.live_tensors; ++t) {
      const torch::Tensor& tensor = state->tensors[t];
      send.narrow(0, offset, tensor.numel()).copy_(tensor.reshape({-1}));
      offset += tensor.numel();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> OptimizerShards::ExchangeStateBlocks(torch::optim::Optimizer& optimizer,
                                                                   const std::vector<int64_t>& steps,
                                                                   const OptimizerStateSpec& spec,
                                                                   const StateBlocks& blocks) {
  const size_t rank = static_cast<size_t>(comm_->rank());
  const auto options = params_.front().options().requires_grad(false);
  torch::Tensor gathered = torch::empty({blocks.buffer_elements}, options);
  torch::Tensor send = blocks.all_gather ? torch::zeros({blocks.largest}, options)
                                         : gathered.narrow(0, blocks.start[rank], blocks.elements[rank]);
  if (auto s = PackOwnState(optimizer, steps, spec, send); !s.ok()) return s;
  const size_t element_size = gathered.element_size();
  if (blocks.all_gather) {
    if (auto s = comm_->AllGather(send.data_ptr(), static_cast<size_t>(blocks.largest) * element_size,
                                  gathered.data_ptr());
        !s.ok()) {
      return s;
    }
    return gathered;
  }
  std::vector<std::shared_ptr<Work>> works;
  for (size_t r = 0; r < blocks.elements.size(); ++r) {
    const int64_t elements = blocks.elements[r];
    if (elements == 0) continue;
    torch::Tensor range = gathered.narrow(0, blocks.start[r], elements);
    works.push_back(
        comm_->BroadcastAsync(range.data_ptr(), static_cast<size_t>(elements) * element_size, static_cast<int>(r)));
  }
  absl::Status first;
  for (auto& work : works) first.Update(work->Wait());
  if (!first.ok()) return first;
  return gathered;
}

void OptimizerShards::AssembleWholeState(torch::optim::Optimizer& optimizer, const std::vector<int64_t>& steps,
                                         const OptimizerStateSpec& spec, const StateBlocks& blocks,
                                         const torch::Tensor& gathered) {
  // Whole state for every parameter with state, but those this rank owns
  // whole (their state is there already): the live tensors to fill.
  std::vector<std::vector<torch::Tensor>> whole(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (steps[i] < 0 || whole_params_.count(i) > 0) continue;
    ParamState state = NewParamState(spec, params_[i], /*zeroed=*/false);
    state.step = steps[i];
    WriteParamState(state, &optimizer.state()[OptimizerStateKey(params_[i])]);
    whole[i].assign(state.tensors.begin(), state.tensors.begin() + static_cast<std::ptrdiff_t>(spec.live_tensors));
  }
  std::vector<int64_t> next = blocks.start;
  for (const ShardPiece& piece : pieces_) {
    if (steps[piece.param] < 0) continue;
    int64_t& at = next[static_cast<size_t>(piece.rank)];
    if (whole[piece.param].empty()) at += static_cast<int64_t>(spec.live_tensors) * piece.length;
    for (torch::Tensor& t : whole[piece.param]) {
      WriteFlat(t, piece.offset, piece.length, gathered.narrow(0, at, piece.length));
      at += piece.length;
    }
  }
  for (size_t k = 0; k < own_.size(); ++k) {
    if (!Whole(own_[k])) optimizer.state().erase(OptimizerStateKey(own_tensors_[k]));
  }
  pieces_hold_state_ = false;
}

}  // namespace herd
