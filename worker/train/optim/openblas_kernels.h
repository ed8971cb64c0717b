// Which OpenBLAS kernels the trainer's matrix products run on.
//
// OpenBLAS (Debian's is built for every x86 core at once) picks its kernels
// from the CPU's model number, and a model it does not know, any CPU newer
// than the library, gets its generic SSE3 "Prescott" kernels whatever the
// CPU can do. On this project's build machines (Intel model 207, AVX-512)
// Debian 12's OpenBLAS 0.3.21 did exactly that: sgemm ran at 12-26 GFLOP/s
// on one core, against 100-129 with its SkylakeX kernels, and a trainer's
// mlp step 4.4x slower (bench/README, "OpenBLAS kernels").
//
// So a trainer whose OpenBLAS took the CPU for a core without AVX, while
// the CPU has AVX, re-executes itself once with OPENBLAS_CORETYPE naming the
// best kernels its flags allow (the variable is read only when the library
// loads). A user's own OPENBLAS_CORETYPE is always kept. Other BLAS
// libraries (MKL in PyTorch's own wheels) are left alone.
#pragma once

#include <optional>
#include <set>
#include <string>
#include "absl/strings/string_view.h"

namespace herd {

// The "flags" of the first processor in /proc/cpuinfo's text.
std::set<std::string> CpuFlags(absl::string_view cpuinfo);

// The OpenBLAS core to force when `detected` (openblas_get_corename) is a
// core without AVX and the CPU's `flags` allow better: "SkylakeX" (AVX-512
// F, BW, DQ, VL), "Haswell" (AVX2 and FMA) or "SandyBridge" (AVX). nullopt
// when OpenBLAS's own choice stands.
std::optional<std::string> BetterOpenBlasCore(absl::string_view detected, const std::set<std::string>& flags);

// What this process's OpenBLAS runs on ("" without OpenBLAS), and what
// herd-trainer would force instead (nullopt: nothing; always nullopt when
// OPENBLAS_CORETYPE is set).
struct OpenBlasKernels {
  std::string loaded;
  std::optional<std::string> better;
};
OpenBlasKernels InspectOpenBlasKernels();

// The kernels trainers on this machine run on: OPENBLAS_CORETYPE where set,
// else the better core, else OpenBLAS's own ("" without OpenBLAS).
// `herd-trainer --probe-openblas` prints it, so benches can give the DDP
// side the same kernels.
std::string TrainerOpenBlasCore();

// Re-executes this program (same argv, same PID) with OPENBLAS_CORETYPE set
// when InspectOpenBlasKernels finds a better core; returns only when it
// does not (or exec fails). Call first thing in main.
void ReexecWithBetterOpenBlasKernels(char** argv);

// One line for the trainer's log: which kernels, and why.
std::string DescribeOpenBlasKernels();

}  // namespace herd
