#include "worker/train/step/autocast.h"

#include <ATen/autocast_mode.h>

#include "worker/train/step/torch_compat.h"

namespace herd {

CudaBf16Autocast::CudaBf16Autocast(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  SetCudaBf16Autocast(true);
  at::autocast::increment_nesting();
}

CudaBf16Autocast::~CudaBf16Autocast() {
  if (!enabled_) return;
  // The cast cache holds bf16 copies of the weights: drop it with the scope.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetCudaBf16Autocast(false);
}

}  // namespace herd
