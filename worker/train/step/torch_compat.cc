#include "worker/train/step/torch_compat.h"

// The fused kernels' declarations exist only in the LibTorch versions that
// have them; these are the only version checks for them.
#define HERD_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
#if HERD_TORCH_AT_LEAST(2, 1)
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#endif
#if HERD_TORCH_AT_LEAST(2, 3)
#include <ATen/ops/_fused_sgd.h>
#endif

namespace herd {

const bool kHaveFusedAdam = HERD_TORCH_AT_LEAST(2, 1);
const bool kHaveFusedSgd = HERD_TORCH_AT_LEAST(2, 3);
const bool kHaveFusedTensorLr = HERD_TORCH_AT_LEAST(2, 3);

bool FusedAdamStep(bool adamw, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                   at::TensorList exp_avg_sqs, at::TensorList steps, double lr, double beta1, double beta2,
                   double weight_decay, double eps) {
#if HERD_TORCH_AT_LEAST(2, 1)
  if (adamw) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2, weight_decay, eps,
                      /*amsgrad=*/false, /*maximize=*/false);
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2, weight_decay, eps,
                     /*amsgrad=*/false, /*maximize=*/false);
  }
  return true;
#else
  return false;
#endif
}

bool FusedSgdStep(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double weight_decay,
                  double momentum, double lr, double dampening, bool nesterov, bool is_first_step) {
#if HERD_TORCH_AT_LEAST(2, 3)
  at::_fused_sgd_(params, grads, momentum_buffers, weight_decay, momentum, lr, dampening, nesterov,
                  /*maximize=*/false, is_first_step);
  return true;
#else
  return false;
#endif
}

bool FusedAdamStepTensorLr(bool adamw, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                           at::TensorList exp_avg_sqs, at::TensorList steps, const at::Tensor& lr, double beta1,
                           double beta2, double weight_decay, double eps) {
#if HERD_TORCH_AT_LEAST(2, 3)
  if (adamw) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2, weight_decay, eps,
                      /*amsgrad=*/false, /*maximize=*/false);
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2, weight_decay, eps,
                     /*amsgrad=*/false, /*maximize=*/false);
  }
  return true;
#else
  return false;
#endif
}

bool FusedSgdStepTensorLr(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers,
                          double weight_decay, double momentum, const at::Tensor& lr, double dampening, bool nesterov,
                          bool is_first_step) {
#if HERD_TORCH_AT_LEAST(2, 3)
  at::_fused_sgd_(params, grads, momentum_buffers, weight_decay, momentum, lr, dampening, nesterov,
                  /*maximize=*/false, is_first_step);
  return true;
#else
  return false;
#endif
}

}  // namespace herd
