#!/usr/bin/env bash
# scripts/gpu_check.sh's dry run on the CPU (HERD_GPU_CHECK_DEVICE=cpu), so the
# one-call GPU check works the first time on a GPU machine: the CPU build's
# binaries as the bundle, a herd job end to end, bench/gpu_bench.py on every
# shape (herd against PyTorch eager and DDP over gloo, parameter counts
# checked against herd's), and the one JSON summary, asserted here.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$0.runfiles}/herd
OUT=${TEST_TMPDIR:-$(mktemp -d)}/out
BUNDLE=${TEST_TMPDIR:-$(mktemp -d)}/bundle
mkdir -p "$OUT" "$BUNDLE/lib"
ln -s "$RUNFILES" "$BUNDLE/bin"  # bazel-bin's layout, as the bundle's bin/

status=0
TMPDIR=${TEST_TMPDIR:-${TMPDIR:-/tmp}} OUT="$OUT" HERD_GPU_CHECK_DEVICE=cpu HERD_GPU_CHECK_BUDGET_S=200 \
  HERD_GPU_CHECK_BENCH_ARGS="--reps 1 --run-timeout 60" \
  bash "$RUNFILES/scripts/gpu_check.sh" "$BUNDLE" > "$OUT/stdout" 2>&1 || status=$?
cat "$OUT/stdout"

# What comes back from a device machine's $OUT (at most 8 files): the summary, the bench's log, one archive.
ls "$OUT"
archived=$(tar -tzf "$OUT/gpu_check.tgz")  # (grep -q on a pipe would cut tar off: SIGPIPE under pipefail)
grep -qx 'gpu_check/nccl_test.log' <<< "$archived"
grep -qx 'gpu_check/fused_optimizer_test.json' <<< "$archived"
grep -qx 'gpu_check/cuda_graph_replay_test.json' <<< "$archived"
grep -qx 'gpu_check/graphed_step_test.json' <<< "$archived"
grep -qx 'gpu_check/gpu_bench.json' <<< "$archived"
test -s "$OUT/gpu_bench.log"

/usr/bin/python3 - "$OUT/gpu_check.json" "$status" <<'EOF'
import json, sys

summary = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
parts = summary["parts"]
assert summary["ok"] and sys.argv[2] == "0", f"gpu_check failed (exit {sys.argv[2]}): {json.dumps(parts)}"
assert summary["device"] == "cpu"
# The CPU build has no NCCL: the smoke binary says so and skips; the test runs its no-NCCL case.
assert parts["nccl_smoke"]["status"] == "skipped", parts["nccl_smoke"]
assert parts["nccl_communicator_test"]["status"] == "passed", parts["nccl_communicator_test"]
assert parts["nccl_communicator_test"]["passed"] >= 1 and parts["nccl_communicator_test"]["failed"] == 0
# The fused CUDA optimizer's test has nothing to run without CUDA: every case skips.
assert parts["fused_optimizer_test"]["status"] == "skipped", parts["fused_optimizer_test"]
assert parts["fused_optimizer_test"]["skipped"] >= 8 and parts["fused_optimizer_test"]["failed"] == 0
assert parts["cuda_graph_replay_test"]["status"] == "skipped", parts["cuda_graph_replay_test"]
assert parts["cuda_graph_replay_test"]["skipped"] == 2 and parts["cuda_graph_replay_test"]["failed"] == 0
assert parts["graphed_step_test"]["status"] == "skipped", parts["graphed_step_test"]
assert parts["graphed_step_test"]["skipped"] == 6 and parts["graphed_step_test"]["failed"] == 0
job = parts["herd_job"]
assert job["status"] == "passed" and job["state"] == "SUCCEEDED" and job["loss"] > 0, job
# The cuda_graphs job ran too: on the CPU it trains eagerly and says why.
graphs = job["graphs"]
assert graphs["ok"] and graphs["state"] == "SUCCEEDED" and not graphs["captured"], graphs
assert graphs["fallback"] and "cuda_graphs: running eagerly (" in graphs["fallback"], graphs
bench = parts["gpu_bench"]
assert bench["status"] == "passed" and bench["complete"], bench
shapes = {r["shape"] for r in bench["results"]}
assert shapes == {"mlp4096_b256", "mlp1024_b64", "resnet_small_b128", "char_transformer_b64"}, shapes
for r in bench["results"]:
    assert r["errors"] == 0 and r["runs"] == 1, r
    # The strong peers ran on the CPU too: the device-resident set and the DataLoader; torch.compile ran or
    # was reported unavailable (Debian's CPU torch may lack it), never a failure.
    assert r["resident_samples_per_s"] and r["loader_samples_per_s"], r
    assert r["best_eager_peer"] in ("eager", "resident", "loader"), r
    for side in ("compile", "compile_ro"):
        assert (r[side + "_samples_per_s"] and r[side + "_compile_seconds"] is not None) or side in r["unavailable"], r
    for side in ("herd", "eager", "ddp"):
        assert r[f"{side}_samples_per_s"] > 0, r
    assert r["herd_vs_eager"] > 0 and r["herd_vs_ddp"] > 0, r
    assert r["herd_peak_bytes"] is None and r["eager_peak_bytes"] is None, r  # no GPU memory on the CPU
    assert r["herd_metrics_scraped"], r  # the worker's /metrics showed each run's trainer
print("gpu_check dry run: ok")
EOF
