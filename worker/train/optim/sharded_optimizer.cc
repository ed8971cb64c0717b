#include "worker/train/optim/sharded_optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/train/optim/grad_clip.h"
#include "worker/train/checkpoint/state_snapshot.h"

namespace herd {
namespace {

using torch::optim::AdamOptions;
using torch::optim::AdamParamState;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;
using torch::optim::OptimizerParamState;
using torch::optim::SGDParamState;

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

template <typename State>
std::unique_ptr<OptimizerParamState> CutAdam(const State& whole, int64_t offset, int64_t length) {
  auto piece = std::make_unique<State>(whole);  // step and the rest as they are
  piece->exp_avg(Cut(whole.exp_avg(), offset, length));
  piece->exp_avg_sq(Cut(whole.exp_avg_sq(), offset, length));
  piece->max_exp_avg_sq(Cut(whole.max_exp_avg_sq(), offset, length));
  return piece;
}

// A piece's state from a whole parameter's: its elements of every tensor,
// the same step count.
std::unique_ptr<OptimizerParamState> CutState(const OptimizerParamState& whole, int64_t offset, int64_t length) {
  if (const auto* s = dynamic_cast<const SGDParamState*>(&whole)) {
    auto piece = std::make_unique<SGDParamState>(*s);
    piece->momentum_buffer(Cut(s->momentum_buffer(), offset, length));
    return piece;
  }
  if (const auto* s = dynamic_cast<const AdamParamState*>(&whole)) return CutAdam(*s, offset, length);
  if (const auto* s = dynamic_cast<const AdamWParamState*>(&whole)) return CutAdam(*s, offset, length);
  return nullptr;
}

// The state tensors of one parameter or piece, in a fixed order: SGD's
// momentum, or Adam's/AdamW's exp_avg, exp_avg_sq (and max_exp_avg_sq with
// amsgrad). With `create`, missing ones are made (empty, like `like`) first.
template <typename State>
std::vector<torch::Tensor> AdamTensors(State* state, const torch::Tensor& like, bool amsgrad, bool create) {
  if (create) {
    state->exp_avg(torch::empty_like(like));
    state->exp_avg_sq(torch::empty_like(like));
    if (amsgrad) state->max_exp_avg_sq(torch::empty_like(like));
  }
  std::vector<torch::Tensor> tensors = {state->exp_avg(), state->exp_avg_sq()};
  if (amsgrad) tensors.push_back(state->max_exp_avg_sq());
  return tensors;
}

template <typename State>
State* StateFor(torch::optim::Optimizer& optimizer, const torch::Tensor& key) {
  auto& slot = optimizer.state()[OptimizerStateKey(key)];
  if (slot == nullptr) slot = std::make_unique<State>();
  return static_cast<State*>(slot.get());
}

// What GatherState needs to know of the optimizer.
struct Kind {
  bool sgd = false;
  bool adamw = false;
  bool amsgrad = false;
  int64_t tensors = 0;  // state tensors per parameter
};

absl::StatusOr<Kind> KindOf(torch::optim::Optimizer& optimizer) {
  if (optimizer.param_groups().size() != 1) {
    return absl::UnimplementedError("sync.shard_optimizer: the optimizer must have exactly one parameter group");
  }
  const auto& options = optimizer.param_groups().front().options();
  Kind kind;
  if (dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr) {
    kind.sgd = true;
  } else if (dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr) {
    kind.adamw = true;
    kind.amsgrad = static_cast<const AdamWOptions&>(options).amsgrad();
  } else if (dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr) {
    kind.amsgrad = static_cast<const AdamOptions&>(options).amsgrad();
  } else {
    return absl::UnimplementedError("sync.shard_optimizer: unsupported optimizer (sgd, adam and adamw are)");
  }
  kind.tensors = kind.sgd ? 1 : (kind.amsgrad ? 3 : 2);
  return kind;
}

// The state tensors of `key`'s entry (created, shaped like `like`, with `create`).
std::vector<torch::Tensor> StateTensors(torch::optim::Optimizer& optimizer, const Kind& kind, const torch::Tensor& key,
                                        const torch::Tensor& like, bool create) {
  if (kind.sgd) {
    auto* state = StateFor<SGDParamState>(optimizer, key);
    if (create) state->momentum_buffer(torch::empty_like(like));
    return {state->momentum_buffer()};
  }
  if (kind.adamw) return AdamTensors(StateFor<AdamWParamState>(optimizer, key), like, kind.amsgrad, create);
  return AdamTensors(StateFor<AdamParamState>(optimizer, key), like, kind.amsgrad, create);
}

// -1 without state, else the step count (0 for SGD, which keeps none).
int64_t StepOf(const OptimizerParamState* state) {
  if (state == nullptr) return -1;
  if (const auto* a = dynamic_cast<const AdamParamState*>(state)) return a->step();
  if (const auto* a = dynamic_cast<const AdamWParamState*>(state)) return a->step();
  return 0;
}

void SetStep(OptimizerParamState* state, int64_t step) {
  if (auto* a = dynamic_cast<AdamParamState*>(state)) a->step(step);
  if (auto* a = dynamic_cast<AdamWParamState*>(state)) a->step(step);
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

int64_t OptimizerStateBytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (const auto* sgd = dynamic_cast<const SGDParamState*>(state.get())) {
      bytes += Bytes(sgd->momentum_buffer());
    } else if (const auto* adam = dynamic_cast<const AdamParamState*>(state.get())) {
      bytes += Bytes(adam->exp_avg()) + Bytes(adam->exp_avg_sq()) + Bytes(adam->max_exp_avg_sq());
    } else if (const auto* adamw = dynamic_cast<const AdamWParamState*>(state.get())) {
      bytes += Bytes(adamw->exp_avg()) + Bytes(adamw->exp_avg_sq()) + Bytes(adamw->max_exp_avg_sq());
    }
  }
  return bytes;
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
    if (whole != state.end()) {
      state[piece_key] = CutState(*whole->second, own_[k].offset, own_[k].length);
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (whole_params_.count(i) == 0) state.erase(OptimizerStateKey(params_[i]));
  }
  pieces_hold_state_ = true;
}

absl::Status OptimizerShards::StepOwnRange(torch::optim::Optimizer& optimizer) {
  if (auto kind = KindOf(optimizer); !kind.ok()) return kind.status();
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
  auto kind_or = KindOf(optimizer);
  if (!kind_or.ok()) return kind_or.status();
  const Kind kind = *kind_or;
  const size_t n = params_.size();
  if (n == 0) return absl::OkStatus();
  DropForeignState(optimizer);  // the pieces hold this rank's whole share now
  torch::NoGradGuard no_grad;
  const int64_t world = comm_->size();
  if (world == 1) return absl::OkStatus();  // one rank: every piece is a whole parameter
  const int rank = comm_->rank();

  // Collective 1: per parameter, what this rank's pieces of it hold: -2 no
  // piece, -1 no state yet (none before the first step), else the step
  // count (0 for SGD). On the parameters' device: NCCL moves device memory only.
  std::vector<int64_t> own_steps(n, -2);
  for (size_t k = 0; k < own_.size(); ++k) {
    auto found = optimizer.state().find(OptimizerStateKey(own_tensors_[k]));
    own_steps[own_[k].param] = StepOf(found == optimizer.state().end() ? nullptr : found->second.get());
  }
  const auto device = params_.front().device();
  // (world > 1 here: one rank returned above.)
  torch::Tensor mine =
      torch::from_blob(own_steps.data(), {static_cast<int64_t>(n)}, torch::kInt64).clone().to(device);
  torch::Tensor everyone = torch::empty({static_cast<int64_t>(n) * world}, mine.options());
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

  // Collective 2: every rank's piece state tensors, packed in flat order
  // into one block per rank. One all-gather, each block padded to the
  // largest, when that padding costs at most as much as the data itself;
  // else (blocks far apart in size) one broadcast per rank of its exact block.
  std::vector<int64_t> block_elements(static_cast<size_t>(world), 0);
  for (const ShardPiece& piece : pieces_) {
    if (step[piece.param] >= 0) block_elements[static_cast<size_t>(piece.rank)] += kind.tensors * piece.length;
  }
  const int64_t block = *std::max_element(block_elements.begin(), block_elements.end());
  const int64_t total = std::accumulate(block_elements.begin(), block_elements.end(), int64_t{0});
  if (block == 0) {
    pieces_hold_state_ = false;  // no state anywhere: none in pieces either
    return absl::OkStatus();
  }
  const bool all_gather = block * world <= 2 * total;  // every rank decides alike
  std::vector<int64_t> start(static_cast<size_t>(world), 0);
  for (int64_t r = 1; r < world; ++r) {
    start[static_cast<size_t>(r)] = all_gather ? r * block : start[r - 1] + block_elements[r - 1];
  }
  const auto state_options = params_.front().options().requires_grad(false);
  torch::Tensor gathered = torch::empty({all_gather ? block * world : total}, state_options);
  torch::Tensor send = all_gather ? torch::zeros({block}, state_options)
                                  : gathered.narrow(0, start[static_cast<size_t>(rank)],
                                                   block_elements[static_cast<size_t>(rank)]);
  int64_t offset = 0;
  for (size_t k = 0; k < own_.size(); ++k) {
    if (step[own_[k].param] < 0) continue;
    for (const torch::Tensor& t : StateTensors(optimizer, kind, own_tensors_[k], own_tensors_[k], false)) {
      send.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
      offset += t.numel();
    }
  }
  const size_t element_size = gathered.element_size();
  if (world == 1) {
    gathered.copy_(send);
  } else if (all_gather) {
    if (auto s = comm_->AllGather(send.data_ptr(), static_cast<size_t>(block) * element_size, gathered.data_ptr());
        !s.ok()) {
      return s;
    }
  } else {
    std::vector<std::shared_ptr<Work>> works;
    for (int r = 0; r < world; ++r) {
      const int64_t elements = block_elements[static_cast<size_t>(r)];
      if (elements == 0) continue;
      torch::Tensor range = gathered.narrow(0, start[static_cast<size_t>(r)], elements);
      works.push_back(comm_->BroadcastAsync(range.data_ptr(), static_cast<size_t>(elements) * element_size, r));
    }
    absl::Status first;
    for (auto& work : works) first.Update(work->Wait());
    if (!first.ok()) return first;
  }

  // Only now, with everything received, is the whole state made and the
  // pieces' dropped: a failed gather leaves each rank with its own pieces.
  std::vector<std::vector<torch::Tensor>> whole(n);
  for (size_t i = 0; i < n; ++i) {
    if (step[i] < 0 || whole_params_.count(i) > 0) continue;  // this rank's whole pieces are there already
    whole[i] = StateTensors(optimizer, kind, params_[i], params_[i], /*create=*/true);
    SetStep(optimizer.state()[OptimizerStateKey(params_[i])].get(), step[i]);
  }
  std::vector<int64_t> next = start;
  for (const ShardPiece& piece : pieces_) {
    if (step[piece.param] < 0) continue;
    int64_t& at = next[static_cast<size_t>(piece.rank)];
    if (whole[piece.param].empty()) at += kind.tensors * piece.length;
    for (torch::Tensor& t : whole[piece.param]) {
      WriteFlat(t, piece.offset, piece.length, gathered.narrow(0, at, piece.length));
      at += piece.length;
    }
  }
  for (size_t k = 0; k < own_.size(); ++k) {
    if (!Whole(own_[k])) optimizer.state().erase(OptimizerStateKey(own_tensors_[k]));
  }
  pieces_hold_state_ = false;
  return absl::OkStatus();
}

}  // namespace herd
