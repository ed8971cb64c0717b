#!/usr/bin/env bash
# The test command: installs what is missing, builds everything and runs every
# test (unit, multi-process integration, end-to-end), compiles the CUDA
# variant against the CUDA LibTorch SDK where ../shared/gpu has it
# (scripts/cuda_build.sh), then prints one line "N passed, N failed" and
# exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
scripts/bazel.sh test //... --test_output=errors --test_summary=short "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

# The GPU build is compiled on every run: a change that breaks it fails here.
cuda_log=$(mktemp)
scripts/cuda_build.sh 2>&1 | tee "$cuda_log" | grep '^cuda build:'
cuda_rc=${PIPESTATUS[0]}
if [ "$cuda_rc" -ne 0 ]; then
  grep -E 'error:|ERROR:' "$cuda_log" | head -40
fi
extra=()
# A skipped CUDA build (no SDK here) is said in one line and counts as nothing.
grep -q '^cuda build: skipped' "$cuda_log" || extra=(--extra "cuda build (scripts/cuda_build.sh)=$cuda_rc")
python3 scripts/summarize_tests.py "$log" "$rc" "${extra[@]}"
