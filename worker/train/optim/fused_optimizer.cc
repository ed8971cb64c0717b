#include "worker/train/optim/fused_optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "worker/train/step/torch_compat.h"

namespace herd {
namespace {

// Every parameter with a gradient is on CUDA.
bool AllOnCuda(torch::optim::Optimizer& optimizer) {
  bool any = false;
  for (auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!p.is_cuda()) return false;
      any = true;
    }
  }
  return any;
}

// `p`'s state slot in `optimizer`, created empty where it has none.
std::unique_ptr<torch::optim::OptimizerParamState>& StateSlot(torch::optim::Optimizer& optimizer,
                                                              const torch::Tensor& p) {
  return optimizer.state()[OptimizerStateKey(p)];
}

// Adam and AdamW share their state type's fields; State is the state type.
template <typename State>
State& AdamState(torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  auto& slot = StateSlot(optimizer, p);
  if (slot == nullptr) {
    auto state = std::make_unique<State>();
    state->step(0);
    state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    slot = std::move(state);
  }
  return static_cast<State&>(*slot);
}

// Whether the fused kernels can step this group exactly as LibTorch would.
bool Fusable(torch::optim::Optimizer& optimizer, torch::optim::OptimizerParamGroup& group) {
  auto& options = group.options();
  if (auto* o = dynamic_cast<torch::optim::AdamOptions*>(&options)) return kHaveFusedAdam && !o->amsgrad();
  if (auto* o = dynamic_cast<torch::optim::AdamWOptions*>(&options)) return kHaveFusedAdam && !o->amsgrad();
  auto* o = dynamic_cast<torch::optim::SGDOptions*>(&options);
  if (o == nullptr || !kHaveFusedSgd) return false;
  if (o->momentum() == 0) return true;
  // LibTorch creates a momentum buffer on a parameter's first step; the
  // kernel's is_first_step is one flag for the whole group.
  int with = 0;
  int without = 0;
  for (const auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    auto found = optimizer.state().find(OptimizerStateKey(p));
    const bool has = found != optimizer.state().end() &&
                     static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer().defined();
    (has ? with : without) += 1;
  }
  return with == 0 || without == 0;
}

}  // namespace

torch::Tensor FusedOptimizerStep::StepTensor(const torch::Tensor& param, int64_t step) {
  DeviceStep& cached = steps_[param.unsafeGetTensorImpl()];
  if (!cached.count.defined()) {
    cached.count = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(param.device()));
    cached.value = 0;
  }
  if (cached.value != step) cached.count.fill_(static_cast<double>(step));  // a device fill, no host sync
  cached.value = step + 1;  // what the increment before the kernel leaves it at
  return cached.count;
}

bool FusedOptimizerStep::Step(torch::optim::Optimizer& optimizer) {
  if (!AllOnCuda(optimizer)) return false;
  // Decide for every group before touching any state.
  for (auto& group : optimizer.param_groups()) {
    if (!Fusable(optimizer, group)) return false;
  }
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    std::vector<torch::Tensor> params;
    std::vector<torch::Tensor> grads;
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      params.push_back(p);
      grads.push_back(p.grad());
    }
    if (params.empty()) continue;
    auto& options = group.options();
    const bool adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options) != nullptr;
    if (adamw || dynamic_cast<torch::optim::AdamOptions*>(&options) != nullptr) {
      std::vector<torch::Tensor> exp_avgs;
      std::vector<torch::Tensor> exp_avg_sqs;
      std::vector<torch::Tensor> steps;
      for (const auto& p : params) {
        auto visit = [&](auto& state) {
          exp_avgs.push_back(state.exp_avg());
          exp_avg_sqs.push_back(state.exp_avg_sq());
          steps.push_back(StepTensor(p, state.step()));
          state.step(state.step() + 1);
        };
        if (adamw) {
          visit(AdamState<torch::optim::AdamWParamState>(optimizer, p));
        } else {
          visit(AdamState<torch::optim::AdamParamState>(optimizer, p));
        }
      }
      // The kernels read the count of the update they make (1 on the first,
      // for its bias correction) and do not increment it: PyTorch adds 1
      // before calling them, and so does this, in one multi-tensor kernel.
      torch::_foreach_add_(steps, 1);
      if (adamw) {
        const auto& o = static_cast<torch::optim::AdamWOptions&>(options);
        FusedAdamStep(true, params, grads, exp_avgs, exp_avg_sqs, steps, o.lr(), std::get<0>(o.betas()),
                      std::get<1>(o.betas()), o.weight_decay(), o.eps());
      } else {
        const auto& o = static_cast<torch::optim::AdamOptions&>(options);
        FusedAdamStep(false, params, grads, exp_avgs, exp_avg_sqs, steps, o.lr(), std::get<0>(o.betas()),
                      std::get<1>(o.betas()), o.weight_decay(), o.eps());
      }
      continue;
    }
    const auto& o = static_cast<torch::optim::SGDOptions&>(options);
    std::vector<torch::Tensor> buffers;
    bool first = false;
    if (o.momentum() != 0) {
      for (const auto& p : params) {
        auto& slot = StateSlot(optimizer, p);
        if (slot == nullptr) slot = std::make_unique<torch::optim::SGDParamState>();
        auto& state = static_cast<torch::optim::SGDParamState&>(*slot);
        if (!state.momentum_buffer().defined()) {
          // LibTorch's first step copies the gradient in: so does the kernel.
          state.momentum_buffer(torch::empty_like(p, torch::MemoryFormat::Preserve));
          first = true;
        }
        buffers.push_back(state.momentum_buffer());
      }
    }
    FusedSgdStep(params, grads, buffers, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                 first);
  }
  return true;
}

}  // namespace herd
