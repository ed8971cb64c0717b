#!/usr/bin/env bash
# The one-slow-worker bench (bench/straggler_bench.py) from a GPU bundle, on a machine
# with a core per worker, such as a lent GPU machine (16 cores): there the
# fast workers run unthrottled and only the slow one is duty-cycled, the
# shape the bench is about; on this project's 2-core machines every worker
# gets a CPU quota instead, so that three fit in two cores (bench/README).
# herd's CPU trainers run from the bundle (scripts/gpu_bundle.sh); the DDP
# side (bench/ddp_peer.py) runs on that machine's own PyTorch.
#
# What the machine may lack, it makes up: Fashion-MNIST at
# /usr/share/datasets/fashion-mnist (both sides read it there) becomes a
# synthetic set of its shape (bench/synthetic_images.py), same cost per step,
# so the samples/s figures hold; accuracy does not.
#
# Usage: scripts/straggler_on_device.sh BUNDLE [straggler_bench.py flags]
#   e.g. scripts/straggler_on_device.sh .gpu-bundle --batch 2048 --steps 60 --reps 2
# Each rep runs every solo case twice, before and after the W run (the
# bench's bracketing); within a 10-minute device call, --reps 2 fits at
# --batch 2048 where a rep took about 2.5 minutes unbracketed, else add
# --no-bracket.
# With $OUT set (the device tool), the output is also left in $OUT/straggler.log.
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE="${1:?usage: scripts/straggler_on_device.sh BUNDLE [straggler_bench.py flags]}"
shift
[[ -x "$BUNDLE/bin/worker/train/herd-trainer" ]] || { echo "no herd-trainer under $BUNDLE/bin (scripts/gpu_bundle.sh)" >&2; exit 2; }
PYTHON=${HERD_BENCH_PYTHON:-/opt/torch/.venv/bin/python3}
[[ -x "$PYTHON" ]] || PYTHON=/usr/bin/python3
LOG=${OUT:+$OUT/straggler.log}
LOG=${LOG:-/dev/null}
{
  echo "# $(nproc) cores; $("$PYTHON" -c 'import torch; print("torch", torch.__version__)' 2>&1)"
  DATA=/usr/share/datasets/fashion-mnist
  if [[ ! -e "$DATA/train-images-idx3-ubyte.gz" ]]; then
    echo "# no Fashion-MNIST at $DATA: a synthetic set of its shape (samples/s hold, accuracy does not)"
    "$PYTHON" bench/synthetic_images.py --gzip "$DATA" || exit 1
  fi
  "$PYTHON" -u bench/straggler_bench.py --bin-dir "$BUNDLE/bin" --lib-dir "$BUNDLE/lib" --python "$PYTHON" "$@"
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
