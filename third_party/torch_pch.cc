// The LibTorch headers that nearly every herd LibTorch file includes,
// compiled once per build into a precompiled header (third_party/BUILD:
// torch_pch). Parsing them is about a third of such a file's compile time;
// loading them precompiled takes a fraction of that. Keep this list short:
// the whole precompiled header is loaded for every file, so a header only
// some files need (torch/torch.h, the nn modules) costs the others more than
// it saves (measured: torch/torch.h here made files slower than no
// precompiled header at all). This file is also the header's text: copied to
// torch_pch.h, it is what the compiler reads instead wherever the
// precompiled one does not fit.
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>
