#include "worker/train/sharded_optimizer.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/train/state_snapshot.h"

namespace herd {
namespace {

using torch::optim::AdamOptions;
using torch::optim::AdamParamState;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;
using torch::optim::SGDParamState;

int64_t Bytes(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

// The state tensors of one parameter, in a fixed order: SGD's momentum, or
// Adam's/AdamW's exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad).
// With `create`, missing ones are made (empty, like the parameter) first.
template <typename State>
std::vector<torch::Tensor> AdamTensors(State* state, const torch::Tensor& param, bool amsgrad, bool create) {
  if (create) {
    state->exp_avg(torch::empty_like(param));
    state->exp_avg_sq(torch::empty_like(param));
    if (amsgrad) state->max_exp_avg_sq(torch::empty_like(param));
  }
  std::vector<torch::Tensor> tensors = {state->exp_avg(), state->exp_avg_sq()};
  if (amsgrad) tensors.push_back(state->max_exp_avg_sq());
  return tensors;
}

template <typename State>
State* StateFor(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto& slot = optimizer.state()[OptimizerStateKey(param)];
  if (slot == nullptr) slot = std::make_unique<State>();
  return static_cast<State*>(slot.get());
}

}  // namespace

std::vector<int> AssignShardOwners(const std::vector<int64_t>& tensor_bytes, int world) {
  std::vector<size_t> order(tensor_bytes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return tensor_bytes[a] > tensor_bytes[b]; });
  std::vector<int64_t> load(static_cast<size_t>(std::max(world, 1)), 0);
  std::vector<int> owners(tensor_bytes.size(), 0);
  for (size_t i : order) {
    const int rank = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owners[i] = rank;
    load[static_cast<size_t>(rank)] += tensor_bytes[i];
  }
  return owners;
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
  std::vector<int64_t> bytes;
  for (const auto& p : params) {
    if (p.dtype() != params.front().dtype() || p.device() != params.front().device()) {
      return absl::InvalidArgumentError(
          "sync.shard_optimizer: the model's parameters must share one dtype and device");
    }
    bytes.push_back(Bytes(p));
  }
  std::vector<int> owners = AssignShardOwners(bytes, comm->size());
  return std::unique_ptr<OptimizerShards>(new OptimizerShards(std::move(params), comm, std::move(owners)));
}

OptimizerShards::OptimizerShards(std::vector<torch::Tensor> params, Communicator* comm, std::vector<int> owners)
    : params_(std::move(params)), comm_(comm), owners_(std::move(owners)) {
  std::vector<int64_t> elements(static_cast<size_t>(comm_->size()), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    elements[static_cast<size_t>(owners_[i])] += params_[i].numel();
    total_bytes_ += Bytes(params_[i]);
    if (Owns(i)) owned_bytes_ += Bytes(params_[i]);
  }
  shard_elements_ = elements.empty() ? 0 : *std::max_element(elements.begin(), elements.end());
  if (!params_.empty()) {
    const auto options = params_.front().options().requires_grad(false);
    send_ = torch::zeros({shard_elements_}, options);
    gathered_ = torch::empty({shard_elements_ * comm_->size()}, options);
  }
}

std::string OptimizerShards::Describe() const {
  int64_t owned = 0;
  for (size_t i = 0; i < params_.size(); ++i) owned += Owns(i) ? 1 : 0;
  return absl::StrFormat(
      "optimizer state sharded over %d ranks (ZeRO-1): rank %d owns %d of %d parameter tensors, %d of %d bytes",
      comm_->size(), comm_->rank(), owned, params_.size(), owned_bytes_, total_bytes_);
}

void OptimizerShards::DropForeignState(torch::optim::Optimizer& optimizer) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!Owns(i)) optimizer.state().erase(OptimizerStateKey(params_[i]));
  }
}

void OptimizerShards::DropForeignGradients() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!Owns(i)) params_[i].mutable_grad() = torch::Tensor();
  }
}

absl::Status OptimizerShards::ShareParameters() {
  if (params_.empty()) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!Owns(i)) continue;
    send_.narrow(0, offset, params_[i].numel()).copy_(params_[i].reshape({-1}));
    offset += params_[i].numel();
  }
  const size_t block = static_cast<size_t>(shard_elements_) * send_.element_size();
  if (auto s = comm_->AllGather(send_.data_ptr(), block, gathered_.data_ptr()); !s.ok()) return s;
  std::vector<int64_t> next(static_cast<size_t>(comm_->size()));
  for (int r = 0; r < comm_->size(); ++r) next[static_cast<size_t>(r)] = r * shard_elements_;
  for (size_t i = 0; i < params_.size(); ++i) {
    int64_t& at = next[static_cast<size_t>(owners_[i])];
    if (!Owns(i)) params_[i].copy_(gathered_.narrow(0, at, params_[i].numel()).view(params_[i].sizes()));
    at += params_[i].numel();
  }
  return absl::OkStatus();
}

absl::Status OptimizerShards::GatherState(torch::optim::Optimizer& optimizer) const {
  torch::NoGradGuard no_grad;
  const size_t n = params_.size();
  if (n == 0) return absl::OkStatus();
  auto* adam = dynamic_cast<torch::optim::Adam*>(&optimizer);
  auto* adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer);
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (adam == nullptr && adamw == nullptr && sgd == nullptr) {
    return absl::UnimplementedError("sync.shard_optimizer: unsupported optimizer (sgd, adam and adamw are)");
  }
  const auto& options = optimizer.param_groups().front().options();
  const bool amsgrad = adam != nullptr ? static_cast<const AdamOptions&>(options).amsgrad()
                       : adamw != nullptr ? static_cast<const AdamWOptions&>(options).amsgrad()
                                          : false;
  const int64_t per_element = sgd != nullptr ? 1 : (amsgrad ? 3 : 2);  // state tensors per parameter

  // Collective 1: per parameter, what its owner holds: -1 no state yet (none
  // before the first step), else the step count (0 for SGD). On the
  // parameters' device: NCCL moves device memory only.
  std::vector<int64_t> owned_state(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (!Owns(i)) continue;
    auto found = optimizer.state().find(OptimizerStateKey(params_[i]));
    if (found == optimizer.state().end()) continue;
    if (const auto* a = dynamic_cast<const AdamParamState*>(found->second.get())) {
      owned_state[i] = a->step();
    } else if (const auto* a = dynamic_cast<const AdamWParamState*>(found->second.get())) {
      owned_state[i] = a->step();
    } else {
      owned_state[i] = 0;
    }
  }
  const auto device = params_.front().device();
  const int64_t world = comm_->size();
  if (world == 1) return absl::OkStatus();  // the one rank owns everything
  torch::Tensor mine =
      torch::from_blob(owned_state.data(), {static_cast<int64_t>(n)}, torch::kInt64).to(device);
  torch::Tensor everyone = torch::empty({static_cast<int64_t>(n) * world}, mine.options());
  if (auto s = comm_->AllGather(mine.data_ptr(), n * sizeof(int64_t), everyone.data_ptr()); !s.ok()) return s;
  everyone = everyone.cpu();
  const int64_t* all = everyone.data_ptr<int64_t>();
  auto has_state = [&](size_t i) { return all[static_cast<size_t>(owners_[i]) * n + i] >= 0; };

  // Collective 2: every owner's state tensors, packed in parameter order
  // into one block per rank. One all-gather, each block padded to the
  // largest, when that padding costs at most as much as the data itself;
  // else (shards far apart in size) one broadcast per rank of its exact block.
  std::vector<int64_t> block_elements(static_cast<size_t>(world), 0);
  for (size_t i = 0; i < n; ++i) {
    if (has_state(i)) block_elements[static_cast<size_t>(owners_[i])] += per_element * params_[i].numel();
  }
  const int64_t block = *std::max_element(block_elements.begin(), block_elements.end());
  const int64_t total = std::accumulate(block_elements.begin(), block_elements.end(), int64_t{0});
  if (block == 0) return absl::OkStatus();
  const bool all_gather = block * world <= 2 * total;  // every rank decides alike
  std::vector<int64_t> start(static_cast<size_t>(world), 0);
  for (int64_t r = 1; r < world; ++r) {
    start[static_cast<size_t>(r)] = all_gather ? r * block : start[r - 1] + block_elements[r - 1];
  }
  auto tensors_of = [&](size_t i, bool create) -> std::vector<torch::Tensor> {
    const torch::Tensor& p = params_[i];
    if (sgd != nullptr) {
      auto* state = StateFor<SGDParamState>(optimizer, p);
      if (create) state->momentum_buffer(torch::empty_like(p));
      return {state->momentum_buffer()};
    }
    if (adamw != nullptr) return AdamTensors(StateFor<AdamWParamState>(optimizer, p), p, amsgrad, create);
    return AdamTensors(StateFor<AdamParamState>(optimizer, p), p, amsgrad, create);
  };
  const auto state_options = params_.front().options().requires_grad(false);
  torch::Tensor gathered = torch::empty({all_gather ? block * world : total}, state_options);
  torch::Tensor send = all_gather ? torch::zeros({block}, state_options)
                                  : gathered.narrow(0, start[static_cast<size_t>(comm_->rank())],
                                                   block_elements[static_cast<size_t>(comm_->rank())]);
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!Owns(i) || !has_state(i)) continue;
    for (const torch::Tensor& t : tensors_of(i, /*create=*/false)) {
      send.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
      offset += t.numel();
    }
  }
  const size_t element_size = gathered.element_size();
  if (all_gather) {
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

  // Only now, with everything received, do foreign parameters get state: a
  // failed gather leaves each rank with its own shard alone.
  std::vector<int64_t> next = start;
  for (size_t i = 0; i < n; ++i) {
    if (!has_state(i)) continue;
    int64_t& at = next[static_cast<size_t>(owners_[i])];
    if (Owns(i)) {
      at += per_element * params_[i].numel();
      continue;
    }
    for (torch::Tensor& t : tensors_of(i, /*create=*/true)) {
      t.copy_(gathered.narrow(0, at, t.numel()).view(t.sizes()));
      at += t.numel();
    }
    const int64_t step = all[static_cast<size_t>(owners_[i]) * n + i];
    auto& slot = optimizer.state()[OptimizerStateKey(params_[i])];
    if (auto* a = dynamic_cast<AdamParamState*>(slot.get())) a->step(step);
    if (auto* a = dynamic_cast<AdamWParamState*>(slot.get())) a->step(step);
  }
  return absl::OkStatus();
}

}  // namespace herd
