// Re-initializes a module's parameters from a seed with a private generator,
// using the same distributions LibTorch's constructors use. Every rank that
// passes the same seed gets bitwise-identical parameters, without touching
// (or racing on) LibTorch's global random state.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>

#include "absl/status/status.h"

namespace herd {

// Knows Linear, Conv2d, Embedding, LayerNorm and GroupNorm; INTERNAL if the
// module holds a parameter of any other kind (so a new layer cannot silently
// keep a rank-dependent initialization).
absl::Status InitializeParameters(torch::nn::Module& module, uint64_t seed);

}  // namespace herd
