#!/usr/bin/env bash
# Builds herd's CUDA variant here (no GPU needed) and packs what a GPU machine
# without Bazel or package registries needs to run it into one folder:
#
#   BUNDLE/bin/coordinator/herd-coordinator   laid out like bazel-bin, so the
#   BUNDLE/bin/worker/daemon/herd-worker      bench scripts' --bin-dir takes it
#   BUNDLE/bin/worker/train/herd-trainer
#   BUNDLE/bin/client/herd
#   BUNDLE/bin/worker/comm/nccl_smoke
#   BUNDLE/bin/worker/comm/nccl_communicator_test
#   BUNDLE/bin/worker/train/optim/fused_optimizer_test
#   BUNDLE/bin/worker/train/step/cuda_graph_replay_test
#   BUNDLE/bin/worker/train/graphed_step_test
#   BUNDLE/lib/      the Debian shared libraries they need (gRPC, protobuf,
#                    Abseil, Gloo, glog, ...), for LD_LIBRARY_PATH on herd's
#                    processes only; never glibc, libstdc++ or libgcc_s, and
#                    never LibTorch, CUDA or NCCL: those are the GPU machine's
#                    own, found through the run paths baked in at link time
#   BUNDLE/MANIFEST  what was built from which commit, file sizes
#
# The binaries are linked against the CUDA LibTorch named by HERD_LIBTORCH
# (default: the SDK in ../shared/gpu, unpacked at the GPU machine's own path,
# see scripts/cuda_build.sh), so they run where that path holds the real one.
# Then, on the GPU machine: scripts/gpu_check.sh BUNDLE (docs/gpu.md).
#
# Usage: scripts/gpu_bundle.sh [BUNDLE]   (default .gpu-bundle, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE="${1:-.gpu-bundle}"
LIMIT_MIB=48  # what travels to a lent GPU machine is 64 MiB, the tree included

TARGETS=(//coordinator:herd-coordinator //worker/daemon:herd-worker //worker/train:herd-trainer //client:herd
  //worker/comm:nccl_smoke //worker/comm:nccl_communicator_test //worker/train/optim:fused_optimizer_test
  //worker/train/step:cuda_graph_replay_test //worker/train:graphed_step_test)
# Stripped: symbols would double the size, and backtraces name herd's frames anyway.
# -O2 by default: these binaries run. HERD_CUDA_OPT=-O0 reuses the objects of
# scripts/cuda_build.sh, to check the packing quickly.
HERD_CUDA_OPT="${HERD_CUDA_OPT:--O2}" HERD_CUDA_TARGETS="$(IFS=+; echo "${TARGETS[*]}")" scripts/cuda_build.sh \
  --strip=always
OUTPUT_BASE="${HERD_CUDA_OUTPUT_BASE:-$HOME/.cache/herd-bazel-cuda/$(pwd | sha256sum | cut -c1-16)}"
BIN="$(bazel --output_base="$OUTPUT_BASE" info bazel-bin 2>/dev/null)"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
for target in "${TARGETS[@]}"; do
  path="${target#//}"; path="${path/://}"
  mkdir -p "$BUNDLE/bin/$(dirname "$path")"
  cp "$BIN/$path" "$BUNDLE/bin/$path"
  chmod u+w "$BUNDLE/bin/$path"
done

# glibc's own libraries and the compiler runtime: the GPU machine's newer
# ones must be used. LibTorch, CUDA and NCCL come from the GPU machine.
is_system_lib() {
  case "$(basename "$1")" in
    ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*|libanl.so*|\
    libnss_*|libstdc++.so*|libgcc_s.so*|linux-vdso*) return 0 ;;
  esac
  case "$1" in
    /opt/torch/*) return 0 ;;
  esac
  return 1
}
missing=""
for binary in $(find "$BUNDLE/bin" -type f); do
  while read -r name _ path _; do
    if [ "$path" = "not" ]; then missing="$missing $name"; continue; fi
    [ -n "$path" ] && [ -e "$path" ] || continue
    is_system_lib "$path" && continue
    cp -nL "$path" "$BUNDLE/lib/"
  done < <(ldd "$binary" | grep '=>')
done
if [ -n "$missing" ]; then
  echo "gpu bundle: unresolved libraries:$missing" >&2
  exit 1
fi

{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!.gpu-bundle' || echo ' (with local changes)')"
  echo "built $(date -u +%FT%TZ) against HERD_LIBTORCH=${HERD_LIBTORCH:-/opt/torch/.venv/lib/python3.12/site-packages/torch}"
  echo "herd's LibTorch files compiled with ${HERD_CUDA_OPT:--O2}"
  (cd "$BUNDLE" && find bin lib -type f -printf '%s %p\n' | sort -k2)
} > "$BUNDLE/MANIFEST"
size_kib=$(du -sk "$BUNDLE" | cut -f1)
echo "gpu bundle: $BUNDLE, $((size_kib / 1024)) MiB ($(ls "$BUNDLE/lib" | wc -l) libraries)"
if [ "$size_kib" -gt $((LIMIT_MIB * 1024)) ]; then
  echo "gpu bundle: over $LIMIT_MIB MiB: it would not travel with the tree to a GPU machine" >&2
  exit 1
fi
