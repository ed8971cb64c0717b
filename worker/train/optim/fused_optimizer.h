// The optimizer step as ATen's fused multi-tensor kernels on CUDA
// (at::_fused_adam_, at::_fused_adamw_, at::_fused_sgd_) instead of
// LibTorch's loop of a few kernels per parameter, where this LibTorch has
// them (torch_compat.h). The arithmetic is PyTorch's Adam, AdamW and SGD,
// which LibTorch's optimizers also implement. The state stays where and as
// LibTorch's optimizer keeps it (Adam/AdamW: exp_avg, exp_avg_sq, step;
// SGD: momentum_buffer), so commits, checkpoints, ZeRO-1 and a later
// unfused step all read and write the same format.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <unordered_map>

namespace herd {

class FusedOptimizerStep {
 public:
  // Steps `optimizer` with fused kernels and returns true, or does nothing
  // and returns false: parameters not on CUDA, a LibTorch without the
  // kernels, amsgrad, or SGD whose momentum buffers exist for some
  // parameters only. The caller then calls optimizer.step().
  // With `device_lr` defined (a float32 scalar on the parameters' device),
  // the kernels read the learning rate from it instead of the groups'
  // options, and a LibTorch without such kernels returns false untouched:
  // a captured step replays with whatever rate the tensor holds.
  bool Step(torch::optim::Optimizer& optimizer, const torch::Tensor& device_lr = torch::Tensor());
  // Before a step is captured as a CUDA graph: brings the device step
  // counts up to the optimizer's (which replays advance behind this
  // object's back), so Step finds nothing to refill during the capture. A
  // refill captured into the graph would set the same count on every
  // replay and freeze Adam's bias correction.
  void CatchUp(torch::optim::Optimizer& optimizer);

 private:
  // Adam's step count as the fused kernels want it: a float tensor on the
  // device, holding the updates taken before this one; Step adds 1 before
  // the kernel reads it. Refilled from the state's int64 count when that
  // changed behind its back (a restore or heal).
  struct DeviceStep {
    torch::Tensor count;
    int64_t value = -1;
  };
  torch::Tensor StepTensor(const torch::Tensor& param, int64_t step);

  std::unordered_map<const void*, DeviceStep> steps_;
};

}  // namespace herd
