// What this LibTorch offers the trainer's CUDA fast paths, decided once
// from its version: Debian's 1.13 (CPU) has none of them, pip's 2.x all.
// Every version check of those paths reads these names, nothing else.
#pragma once

#include <torch/version.h>

#define HERD_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// at::_fused_adam_ and at::_fused_adamw_ (multi-tensor, one launch per group).
#define HERD_TORCH_FUSED_ADAM HERD_TORCH_AT_LEAST(2, 1)
// at::_fused_sgd_.
#define HERD_TORCH_FUSED_SGD HERD_TORCH_AT_LEAST(2, 3)
// c10::Event::elapsedTime and ::synchronize, device-generic (no c10_cuda link).
#define HERD_TORCH_EVENT_TIMING HERD_TORCH_AT_LEAST(2, 5)
