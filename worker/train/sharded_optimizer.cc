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
using torch::optim::OptimizerParamState;
using torch::optim::SGDParamState;

int64_t Bytes(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

// Pending broadcasts of one GatherState, waited together.
class Broadcasts {
 public:
  explicit Broadcasts(Communicator* comm) : comm_(comm) {}
  void Add(const torch::Tensor& t, int root) {
    works_.push_back(comm_->BroadcastAsync(t.data_ptr(), t.nbytes(), root));
  }
  absl::Status Wait() {
    absl::Status first;
    for (auto& work : works_) first.Update(work->Wait());
    return first;
  }

 private:
  Communicator* comm_;
  std::vector<std::shared_ptr<Work>> works_;
};

// Adam and AdamW keep the same fields in distinct classes.
template <typename State>
void BroadcastAdam(const torch::Tensor& param, bool owner, bool amsgrad, int root, State* state,
                   torch::Tensor* step, Broadcasts* broadcasts) {
  if (!owner) {
    state->exp_avg(torch::empty_like(param));
    state->exp_avg_sq(torch::empty_like(param));
    if (amsgrad) state->max_exp_avg_sq(torch::empty_like(param));
  }
  // The step count travels as a tensor on the parameters' device (NCCL
  // moves device memory only).
  *step = torch::full({1}, owner ? state->step() : 0, torch::dtype(torch::kInt64).device(param.device()));
  broadcasts->Add(*step, root);
  broadcasts->Add(state->exp_avg(), root);
  broadcasts->Add(state->exp_avg_sq(), root);
  if (amsgrad) broadcasts->Add(state->max_exp_avg_sq(), root);
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
  // Which parameters have state yet (none before the first step), as each
  // owner sees it; on the parameters' device (NCCL moves device memory only).
  std::vector<uint8_t> owned_state(n, 0);
  for (size_t i = 0; i < n; ++i) {
    owned_state[i] = Owns(i) && optimizer.state().count(OptimizerStateKey(params_[i])) != 0 ? 1 : 0;
  }
  const auto flags = torch::dtype(torch::kUInt8).device(params_.front().device());
  torch::Tensor mine = torch::from_blob(owned_state.data(), {static_cast<int64_t>(n)}, torch::kUInt8).to(flags);
  torch::Tensor everyone = torch::zeros({static_cast<int64_t>(n) * comm_->size()}, flags);
  if (auto s = comm_->AllGather(mine.data_ptr(), n, everyone.data_ptr()); !s.ok()) return s;
  everyone = everyone.cpu();
  const uint8_t* all = everyone.data_ptr<uint8_t>();

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
  Broadcasts broadcasts(comm_);
  std::vector<std::pair<OptimizerParamState*, torch::Tensor>> steps;  // Adam step counts in flight
  for (size_t i = 0; i < n; ++i) {
    const int owner = owners_[i];
    if (all[static_cast<size_t>(owner) * n + i] == 0) continue;
    const bool owned = Owns(i);
    const torch::Tensor& p = params_[i];
    torch::Tensor step;
    if (sgd != nullptr) {
      auto* state = StateFor<SGDParamState>(optimizer, p);
      if (!owned) state->momentum_buffer(torch::empty_like(p));
      broadcasts.Add(state->momentum_buffer(), owner);
    } else if (adamw != nullptr) {
      auto* state = StateFor<AdamWParamState>(optimizer, p);
      BroadcastAdam(p, owned, amsgrad, owner, state, &step, &broadcasts);
      steps.emplace_back(state, step);
    } else {
      auto* state = StateFor<AdamParamState>(optimizer, p);
      BroadcastAdam(p, owned, amsgrad, owner, state, &step, &broadcasts);
      steps.emplace_back(state, step);
    }
  }
  if (auto s = broadcasts.Wait(); !s.ok()) {
    DropForeignState(optimizer);  // half-received state must not outlive the failed gather
    return s;
  }
  for (auto& [state, step] : steps) {
    const int64_t value = step.cpu().item<int64_t>();
    if (auto* a = dynamic_cast<AdamParamState*>(state)) a->step(value);
    if (auto* a = dynamic_cast<AdamWParamState*>(state)) a->step(value);
  }
  return absl::OkStatus();
}

}  // namespace herd
