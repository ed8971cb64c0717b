#include "worker/train/optim/fused_optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "worker/train/optim/optimizer_state.h"
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

// Whether the fused kernels can step this group exactly as LibTorch would.
bool Fusable(torch::optim::Optimizer& optimizer, torch::optim::OptimizerParamGroup& group) {
  auto& options = group.options();
  const auto spec = StateSpecOf(options);
  if (!spec.ok()) return false;
  if (auto* o = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
    if (!kHaveFusedAdam || o->amsgrad()) return false;
  } else if (auto* o = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
    if (!kHaveFusedAdam || o->amsgrad()) return false;
  } else if (!kHaveFusedSgd) {
    return false;
  }
  // The state there is the group's kind (Step reads it as such); and
  // LibTorch creates a momentum buffer on a parameter's first step, while
  // the kernel's is_first_step is one flag for the whole group.
  int with = 0;
  int without = 0;
  for (const auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    auto found = optimizer.state().find(OptimizerStateKey(p));
    bool has = false;
    if (found != optimizer.state().end() && found->second != nullptr) {
      auto state = ReadParamState(*found->second);
      if (!state.ok() || state->kind != spec->kind) return false;
      has = spec->kind == OptimizerKind::kSgd && state->tensors[kMomentumBuffer].defined();
    }
    (has ? with : without) += 1;
  }
  const auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options);
  return sgd == nullptr || sgd->momentum() == 0 || with == 0 || without == 0;
}

// Adam's and AdamW's hyperparameters, one shape for both option types.
struct AdamHyper {
  double lr, beta1, beta2, weight_decay, eps;
};
template <typename Options>
AdamHyper HyperOf(const Options& o) {
  return {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps()};
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

void FusedOptimizerStep::CatchUp(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      auto cached = steps_.find(p.unsafeGetTensorImpl());
      if (cached == steps_.end() || !cached->second.count.defined()) continue;
      auto found = optimizer.state().find(OptimizerStateKey(p));
      if (found == optimizer.state().end() || found->second == nullptr) continue;
      auto state = ReadParamState(*found->second);
      if (!state.ok() || state->step == cached->second.value) continue;
      cached->second.count.fill_(static_cast<double>(state->step));  // a device fill, outside the capture
      cached->second.value = state->step;
    }
  }
}

bool FusedOptimizerStep::Step(torch::optim::Optimizer& optimizer, const torch::Tensor& device_lr) {
  if (!AllOnCuda(optimizer)) return false;
  if (device_lr.defined() && !kHaveFusedTensorLr) return false;
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
    const OptimizerStateSpec spec = *StateSpecOf(options);  // Fusable checked it
    if (spec.kind != OptimizerKind::kSgd) {
      std::vector<torch::Tensor> exp_avgs;
      std::vector<torch::Tensor> exp_avg_sqs;
      std::vector<torch::Tensor> steps;
      for (const auto& p : params) {
        auto& slot = StateSlot(optimizer, p);
        if (slot == nullptr) WriteParamState(NewParamState(spec, p, /*zeroed=*/true), &slot);
        ParamState state = *ReadParamState(*slot);  // of the group's kind: Fusable checked it
        exp_avgs.push_back(state.tensors[kExpAvg]);
        exp_avg_sqs.push_back(state.tensors[kExpAvgSq]);
        steps.push_back(StepTensor(p, state.step));
        state.step += 1;
        WriteParamState(state, &slot);
      }
      // The kernels read the count of the update they make (1 on the first,
      // for its bias correction) and do not increment it: PyTorch adds 1
      // before calling them, and so does this, in one multi-tensor kernel.
      torch::_foreach_add_(steps, 1);
      const bool adamw = spec.kind == OptimizerKind::kAdamW;
      const AdamHyper h = adamw ? HyperOf(static_cast<torch::optim::AdamWOptions&>(options))
                                : HyperOf(static_cast<torch::optim::AdamOptions&>(options));
      if (device_lr.defined()) {
        FusedAdamStepTensorLr(adamw, params, grads, exp_avgs, exp_avg_sqs, steps, device_lr, h.beta1, h.beta2,
                              h.weight_decay, h.eps);
      } else {
        FusedAdamStep(adamw, params, grads, exp_avgs, exp_avg_sqs, steps, h.lr, h.beta1, h.beta2, h.weight_decay,
                      h.eps);
      }
      continue;
    }
    const auto& o = static_cast<torch::optim::SGDOptions&>(options);
    std::vector<torch::Tensor> buffers;
    bool first = false;
    if (o.momentum() != 0) {
      for (const auto& p : params) {
        auto& slot = StateSlot(optimizer, p);
        ParamState state;  // SGD's, no tensors yet
        if (slot != nullptr) state = *ReadParamState(*slot);  // of the group's kind: Fusable checked it
        if (state.tensors.empty() || !state.tensors[kMomentumBuffer].defined()) {
          // LibTorch's first step copies the gradient in: so does the kernel.
          state = NewParamState(spec, p, /*zeroed=*/false);
          WriteParamState(state, &slot);
          first = true;
        }
        buffers.push_back(state.tensors[kMomentumBuffer]);
      }
    }
    if (device_lr.defined()) {
      FusedSgdStepTensorLr(params, grads, buffers, o.weight_decay(), o.momentum(), device_lr, o.dampening(),
                           o.nesterov(), first);
    } else {
      FusedSgdStep(params, grads, buffers, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                   first);
    }
  }
  return true;
}

}  // namespace herd
