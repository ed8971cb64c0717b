#!/usr/bin/env bash
# The one-call GPU check: everything herd can verify on a GPU machine, in one
# prepared run of under 5 minutes, with no Bazel and no package registry.
#
#   scripts/gpu_check.sh BUNDLE_DIR
#
# BUNDLE_DIR is what scripts/gpu_bundle.sh packs: bin/ in bazel-bin's layout
# (coordinator/herd-coordinator, worker/daemon/herd-worker,
# worker/train/herd-trainer, client/herd, worker/comm/nccl_smoke,
# worker/comm/nccl_communicator_test, worker/train/fused_optimizer_test,
# worker/train/cuda_graph_replay_test, worker/train/graphed_step_test) and lib/, the shared libraries herd's
# processes need (LD_LIBRARY_PATH for them only, never for Python).
# Parts, each bounded by `timeout` so one hang cannot eat the others' time:
#   1. nccl_smoke --world=1 (its JSON line);
#   2. nccl_communicator_test (gtest; passed / skipped / failed);
#   2b. fused_optimizer_test (gtest: the fused CUDA optimizer step against
#      LibTorch's optimizers);
#   2c. cuda_graph_replay_test (gtest: a step captured as a CUDA graph and
#      replayed against the same step run eagerly, bitwise, step by step);
#   2d. graphed_step_test (gtest: the trainer's step - forward, loss,
#      backward, clipping, fused optimizer with a device learning rate -
#      captured and replayed against eager, bitwise, step by step);
#   3. a herd job end to end on the device (scripts/gpu_job_check.py: a local
#      coordinator, one worker, the CLI, a small mlp job that must SUCCEED,
#      the same job with cuda_graphs: true captured and within 1% of its loss);
#   4. bench/gpu_bench.py: herd against PyTorch eager, DDP and the strong peers
#      (device-resident, DataLoader, torch.compile default and reduce-overhead), every shape,
#      fp32 and bf16, within the time left (--budget-s).
# Prints each part's output as it goes, then ONE JSON line: each part's
# pass/fail and figures, the GPU's name (nvidia-smi), the total seconds.
# Writes the parts' outputs, logs and that summary (gpu_check.json) under a
# temporary folder named at the start; when $OUT is set (the device tool
# brings back at most 8 files from it), $OUT gets gpu_check.json,
# gpu_bench.log and gpu_check.tgz (the whole folder) instead.
# Exit status 0 when every part passed.
#
# Environment:
#   HERD_GPU_CHECK_DEVICE=cpu   a dry run on a CPU build (bazel-bin as bin/):
#                               the NCCL parts may only skip, the job and the
#                               bench run on the CPU
#   HERD_GPU_CHECK_PYTHON       the interpreter with PyTorch (default
#                               /opt/torch/.venv/bin/python3 on cuda, /usr/bin/python3 on cpu)
#   HERD_GPU_CHECK_BUDGET_S     the whole run's budget in seconds (default 270)
#   HERD_GPU_CHECK_BENCH_ARGS   more flags for gpu_bench.py (e.g. "--shapes mlp4096_b256 --reps 1")
set -uo pipefail

if [[ $# -ne 1 || ! -d "$1/bin" ]]; then
  echo "usage: scripts/gpu_check.sh BUNDLE_DIR   (BUNDLE_DIR/bin in bazel-bin's layout, BUNDLE_DIR/lib)" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=$(cd "$1" && pwd)
BIN="$BUNDLE/bin"
LIB="$BUNDLE/lib"
DEVICE=${HERD_GPU_CHECK_DEVICE:-cuda}
case "$DEVICE" in
  cuda) PYTHON=${HERD_GPU_CHECK_PYTHON:-/opt/torch/.venv/bin/python3} ;;
  cpu) PYTHON=${HERD_GPU_CHECK_PYTHON:-/usr/bin/python3} ;;
  *) echo "HERD_GPU_CHECK_DEVICE: expected cuda or cpu, got '$DEVICE'" >&2; exit 2 ;;
esac
BUDGET=${HERD_GPU_CHECK_BUDGET_S:-270}
if ! [[ "$BUDGET" =~ ^[0-9]+$ ]] || (( BUDGET < 60 )); then
  echo "HERD_GPU_CHECK_BUDGET_S: expected whole seconds >= 60, got '$BUDGET'" >&2
  exit 2
fi
if [[ ! -x "$PYTHON" ]]; then
  echo "HERD_GPU_CHECK_PYTHON: $PYTHON is not an executable" >&2
  exit 2
fi
RESULTS=${OUT:-$(mktemp -d -t herd-gpu-check-XXXXXX)}
RESULTS="$RESULTS/gpu_check"
mkdir -p "$RESULTS"
# Scratch (clusters, data sets, final models) stays out of $OUT; its logs are copied there at the end.
WORK=$(mktemp -d -t herd-gpu-check-work-XXXXXX)
mkdir -p "$WORK/tmp"
START=$SECONDS
# Herd's processes only: the bundle's libraries first.
herd_env() { LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
left() { echo $(( BUDGET - (SECONDS - START) )); }
# bounded SECONDS CMD...: timeout with a SIGKILL 10 s after the SIGTERM, and never past the budget
# (10 s kept for the summary), so the whole run stays within it even if every part hangs.
bounded() {
  local t=$1; shift
  local cap=$(( $(left) - 10 ))
  (( t > cap )) && t=$cap
  (( t < 5 )) && t=5
  timeout -k 10 "$t" "$@"
}

echo "== gpu_check: device $DEVICE, bundle $BUNDLE, budget ${BUDGET} s, outputs in $RESULTS"
GPU=$(bounded 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "== GPU: ${GPU:-none (nvidia-smi absent or failed)}"
echo "$GPU" > "$RESULTS/nvidia-smi.txt"

echo "== 1. nccl_smoke --world=1"
start=$SECONDS
herd_env bounded 60 "$BIN/worker/comm/nccl_smoke" --world=1 > "$RESULTS/nccl_smoke.json" 2> "$RESULTS/nccl_smoke.log"
echo $? > "$RESULTS/nccl_smoke.rc"
echo $(( SECONDS - start )) > "$RESULTS/nccl_smoke.seconds"
tail -1 "$RESULTS/nccl_smoke.json"

# gtest_part NAME SECONDS BINARY: a gtest binary's run as the summary reads it (NAME.json, .log, .rc, .seconds).
gtest_part() {
  local name=$1 seconds=$2 binary=$3 start=$SECONDS
  herd_env bounded "$seconds" "$binary" --gtest_output="json:$RESULTS/$name.json" > "$RESULTS/$name.log" 2>&1
  echo $? > "$RESULTS/$name.rc"
  echo $(( SECONDS - start )) > "$RESULTS/$name.seconds"
  grep -E '^\[  (PASSED|SKIPPED|FAILED) |Failure|max difference' "$RESULTS/$name.log" | head -20
}

echo "== 2. nccl_communicator_test"
gtest_part nccl_test 120 "$BIN/worker/comm/nccl_communicator_test"

echo "== 2b. fused_optimizer_test"
gtest_part fused_optimizer_test 60 "$BIN/worker/train/optim/fused_optimizer_test"

echo "== 2c. cuda_graph_replay_test"
gtest_part cuda_graph_replay_test 60 "$BIN/worker/train/step/cuda_graph_replay_test"

echo "== 2d. graphed_step_test"
gtest_part graphed_step_test 60 "$BIN/worker/train/graphed_step_test"

echo "== 3. a herd job on $DEVICE"
# It uses bench's local cluster (bench/herdbench), found through PYTHONPATH.
TMPDIR="$WORK/tmp" PYTHONPATH="$ROOT/bench" bounded 150 "$PYTHON" "$ROOT/scripts/gpu_job_check.py" --bin-dir "$BIN" --lib-dir "$LIB" \
  --device "$DEVICE" --timeout 120 > "$RESULTS/herd_job.json" 2> "$RESULTS/herd_job.log"
echo $? > "$RESULTS/herd_job.rc"
tail -1 "$RESULTS/herd_job.json"

echo "== 4. gpu_bench.py ($(left) s left)"
bench_time=$(( $(left) - 15 ))
if (( bench_time < 30 )); then
  echo "no time left for the bench" | tee "$RESULTS/gpu_bench.log"
  echo 124 > "$RESULTS/gpu_bench.rc"
else
  # --budget-s: no second repetition of a shape starts unless it can end 20 s before the hard stop.
  # shellcheck disable=SC2086  # HERD_GPU_CHECK_BENCH_ARGS is a list of flags
  TMPDIR="$WORK/tmp" bounded "$bench_time" "$PYTHON" "$ROOT/bench/gpu_bench.py" --device "$DEVICE" \
    --bin-dir "$BIN" --lib-dir "$LIB" --python "$PYTHON" --budget-s $(( bench_time - 20 )) --run-timeout 120 \
    --json-out "$RESULTS/gpu_bench.json" ${HERD_GPU_CHECK_BENCH_ARGS:-} 2>&1 | tee "$RESULTS/gpu_bench.log"
  echo "${PIPESTATUS[0]}" > "$RESULTS/gpu_bench.rc"
fi

# The herd and peer logs (not the data sets or models), small files only.
(cd "$WORK/tmp" && find . -name '*.log' -size -2M -exec cp --parents {} "$RESULTS/" \;) 2>/dev/null
rm -rf "$WORK"

"$PYTHON" "$ROOT/scripts/gpu_check_summary.py" "$RESULTS" "$DEVICE" $(( SECONDS - START )) \
  > "$RESULTS/gpu_check.json"
rc=$?
cat "$RESULTS/gpu_check.json"
# The device tool brings back at most 8 files from $OUT: there, the summary,
# the bench's log and one archive of everything else.
if [[ -n "${OUT:-}" ]]; then
  tar -C "$OUT" -czf "$OUT/gpu_check.tgz" gpu_check
  cp "$RESULTS/gpu_check.json" "$RESULTS/gpu_bench.log" "$OUT/" 2>/dev/null
  rm -rf "$RESULTS"
fi
exit $rc
