// Every difference between the LibTorch versions herd builds against lives
// here: Debian's 1.13 (the CPU build) and pip's 2.x (the CUDA build), so the
// rest of the code is written once.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>
#include <torch/version.h>
#if (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9) || TORCH_VERSION_MAJOR > 2
#include <ATen/DeviceAccelerator.h>
#define HERD_TORCH_HAS_ACCELERATOR_STATS 1
#endif

#include <sstream>
#include <string>
#include <type_traits>

namespace herd {

// The key of torch::optim::Optimizer::state(): LibTorch 1.x keys it by the
// parameter's TensorImpl address printed as a string, 2.x by the address
// itself (void*).
using OptimizerStateKeyType =
    typename std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

namespace torch_compat_detail {
inline std::string StateKeyOf(c10::TensorImpl* impl, std::string*) {
  std::ostringstream key;  // what LibTorch 1.x's c10::guts::to_string(impl) printed
  key << impl;
  return key.str();
}
inline void* StateKeyOf(c10::TensorImpl* impl, void**) { return impl; }
}  // namespace torch_compat_detail

// The key under which a LibTorch optimizer keeps `param`'s state.
inline OptimizerStateKeyType OptimizerStateKey(const torch::Tensor& param) {
  return torch_compat_detail::StateKeyOf(param.unsafeGetTensorImpl(), static_cast<OptimizerStateKeyType*>(nullptr));
}

// Turns CUDA autocast to bf16 on or off. LibTorch 2.4 made the switches per
// device type; 1.13 has CUDA-only calls.
inline void SetCudaBf16Autocast(bool enabled) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
  if (enabled) at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
#else
  at::autocast::set_enabled(enabled);
  if (enabled) at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
#endif
}

// ATen's fused multi-tensor optimizer kernels (CUDA only): at::_fused_adam_
// and at::_fused_adamw_ since LibTorch 2.1, at::_fused_sgd_ since 2.3. Where
// this LibTorch lacks one, its k-flag is false and its call returns false
// without touching anything. Arguments are PyTorch's, in its order; `steps`
// are float scalars on the device holding the number of this update (1 on
// the first): the kernel reads them and does not increment them.
extern const bool kHaveFusedAdam;
extern const bool kHaveFusedSgd;
bool FusedAdamStep(bool adamw, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                   at::TensorList exp_avg_sqs, at::TensorList steps, double lr, double beta1, double beta2,
                   double weight_decay, double eps);
bool FusedSgdStep(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double weight_decay,
                  double momentum, double lr, double dampening, bool nesterov, bool is_first_step);
// The same kernels reading the learning rate from `lr`, a float32 scalar on
// the parameters' device (their `.tensor_lr` overloads, since LibTorch 2.3
// here), so a captured step follows the schedule without re-capture. The
// kernels cast the rate to float either way: the same update to the bit as
// a double `lr` equal to the tensor's value.
extern const bool kHaveFusedTensorLr;
bool FusedAdamStepTensorLr(bool adamw, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                           at::TensorList exp_avg_sqs, at::TensorList steps, const at::Tensor& lr, double beta1,
                           double beta2, double weight_decay, double eps);
bool FusedSgdStepTensorLr(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
                          double weight_decay, double momentum, const at::Tensor& lr, double dampening, bool nesterov,
                          bool is_first_step);

// Peak bytes the GPU's caching allocator has reserved on `device` since the
// process started; -1 where unknown: a CPU device, or LibTorch before 2.9
// (no device-generic allocator statistics; CUDA's own would need the CUDA
// headers in every build). Reads host-side counters only: no device sync.
inline int64_t DevicePeakReservedBytes(const torch::Device& device) {
#ifdef HERD_TORCH_HAS_ACCELERATOR_STATS
  if (!device.is_cuda()) return -1;
  try {
    const auto stats = at::accelerator::getDeviceStats(device.index());
    return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  } catch (const std::exception&) {
    return -1;  // the allocator is not initialized yet (nothing allocated on the device)
  }
#else
  (void)device;
  return -1;
#endif
}

}  // namespace herd
