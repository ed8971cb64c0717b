#!/usr/bin/env bash
# Compiles and links herd's CUDA variant: every target that links LibTorch or
# NCCL, built against a CUDA LibTorch (HERD_LIBTORCH) and CUDA runtime + NCCL
# (HERD_CUDA, optionally HERD_NCCL_ROOT), so a change that breaks the GPU
# build fails here on a machine with no GPU.
#
# Where no CUDA LibTorch is given, the SDK in ../shared/gpu (a CUDA LibTorch
# with link stubs, see its README) is unpacked at the GPU machine's own path
# and used; where neither exists this says so in one line and exits 0.
# The CUDA variant has its own Bazel output base, so switching between it and
# the CPU build never invalidates either.
#
# Usage: scripts/cuda_build.sh [bazel build flags...]
#   HERD_CUDA_TARGETS  override the target expression (default: what links
#                      LibTorch or NCCL)
set -euo pipefail
cd "$(dirname "$0")/.."

SDK_ARCHIVE="${HERD_CUDA_SDK:-../shared/gpu/cuda-libtorch-sdk.txz}"
SITE=/opt/torch/.venv/lib/python3.12/site-packages

if [ -z "${HERD_LIBTORCH:-}" ]; then
  if [ ! -e "$SITE/torch/lib/libtorch_cuda.so" ]; then
    if [ ! -f "$SDK_ARCHIVE" ]; then
      echo "cuda build: skipped (no HERD_LIBTORCH and no CUDA LibTorch SDK at $SDK_ARCHIVE)"
      exit 0
    fi
    mkdir -p "$SITE"
    tar -C "$SITE" -xJf "$SDK_ARCHIVE"
  fi
  export HERD_LIBTORCH="$SITE/torch"
  export HERD_CUDA="${HERD_CUDA:-$SITE/nvidia}"
fi
if [ ! -e "$HERD_LIBTORCH/lib/libtorch_cuda.so" ]; then
  echo "cuda build: HERD_LIBTORCH=$HERD_LIBTORCH has no lib/libtorch_cuda.so: not a CUDA LibTorch" >&2
  exit 1
fi

CACHE="${HERD_BAZEL_CACHE:-$HOME/.cache/herd-bazel}"
OUTPUT_BASE="${HERD_CUDA_OUTPUT_BASE:-$HOME/.cache/herd-bazel-cuda/$(pwd | sha256sum | cut -c1-16)}"
mkdir -p "$CACHE" "$OUTPUT_BASE"
bazel_cuda() { bazel --output_base="$OUTPUT_BASE" "$@"; }
# The bazel-* links in the workspace belong to the CPU build: this build
# must not repoint them into its own output base.
no_links=--experimental_convenience_symlinks=ignore

# The workspace's own packages: //... would also walk the CPU build's
# bazel-* convenience links, which point into another output base.
universe=$(for d in */; do d=${d%/}; case "$d" in bazel-*|third_party) ;; *) [ -n "$(find "$d" -name BUILD -print -quit)" ] && printf '//%s/... + ' "$d";; esac; done)
universe=${universe% + }
targets="${HERD_CUDA_TARGETS:-rdeps($universe, @libtorch//:libtorch + @cuda//:nccl)}"
echo "cuda build: HERD_LIBTORCH=$HERD_LIBTORCH HERD_CUDA=${HERD_CUDA:-} ${HERD_NCCL_ROOT:+HERD_NCCL_ROOT=$HERD_NCCL_ROOT}"
# The query runs with the same environment, so @libtorch and @cuda are the CUDA ones.
# Manual targets (the precompiled-header builders in third_party) are built
# only as what other targets need.
list=$(bazel_cuda query "kind('cc_(binary|test|library)', $targets) except attr(tags, manual, $targets)" --noshow_progress | grep '^//') || {
  echo "cuda build: the target query failed" >&2
  exit 1
}
count=$(echo "$list" | wc -l)
echo "cuda build: $count targets"
# shellcheck disable=SC2086
# A compile-and-link check: -O0 halves the compile time of LibTorch-heavy
# files (worker/, tests/, bench/); scripts/gpu_bundle.sh sets
# HERD_CUDA_OPT=-O2 for binaries that run. Every other file (protos,
# coordinator, CLI, common) compiles exactly as in the CPU build, so it comes
# from the disk cache that build just filled.
bazel_cuda build --disk_cache="$CACHE" "$no_links" --noshow_progress \
  --per_file_copt="^(worker|tests|bench)/.*@${HERD_CUDA_OPT:--O0}" "$@" $list
# NCCL must really be in this build: the stub would compile anywhere.
grep -q 'kHaveNccl = true' "$(bazel_cuda info output_base 2>/dev/null)/external/cuda/herd_cuda/config.h" || {
  echo "cuda build: NCCL was not found under HERD_CUDA=${HERD_CUDA:-}: $(grep -o 'kNcclUnavailableReason.*' \
    "$(bazel_cuda info output_base 2>/dev/null)/external/cuda/herd_cuda/config.h")" >&2
  exit 1
}
echo "cuda build: ok ($count targets compiled and linked against the CUDA LibTorch)"
