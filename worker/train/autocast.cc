#include "worker/train/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace herd {
namespace {

// LibTorch 2.4 made the autocast switches per device type; Debian's 1.13 has
// the older CUDA-only calls. Both are supported.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
void SetCudaAutocast(bool enabled) {
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
  if (enabled) at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
}
#else
void SetCudaAutocast(bool enabled) {
  at::autocast::set_enabled(enabled);
  if (enabled) at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
}
#endif

}  // namespace

CudaBf16Autocast::CudaBf16Autocast(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  SetCudaAutocast(true);
  at::autocast::increment_nesting();
}

CudaBf16Autocast::~CudaBf16Autocast() {
  if (!enabled_) return;
  // The cast cache holds bf16 copies of the weights: drop it with the scope.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetCudaAutocast(false);
}

}  // namespace herd
