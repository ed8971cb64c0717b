#!/usr/bin/env python3
"""herd against PyTorch DDP, side by side, in one run.

For each model and world size (1, 2) it alternates a herd run (a real local
coordinator + W worker daemons + trainers over Gloo) and a PyTorch DDP run
(bench/ddp_peer.py, gloo, CPU), several times,
with the same model, per-worker batch, optimizer (SGD lr 0.05 momentum 0.9),
one intra-op thread per worker, the same warmup and timed steps, on
Fashion-MNIST. Each side's samples/s is measured the same way: wall time over
the timed steps only (herd: between rank 0's commit-point log lines at the
first and last timed step; DDP: between barriers).

Models: mnist_cnn and mlp (herd's defaults), and two compute-bound ones:
mlp_4096 (herd's mlp with `hidden: [4096, 4096]`) and torchscript (a
residual 2048-wide MLP saved as TorchScript, the same file loaded by both
sides).

Prints one line per run, a summary table, and a final JSON line with the
medians, the herd/DDP ratio, and each side's scaling efficiency
(samples/s at W=2 divided by twice the samples/s at W=1).

Usage: bench/compare_ddp.py [--models mnist_cnn,mlp,mlp_4096,torchscript] [--worlds 1,2]
                            [--steps 100] [--warmup 10] [--batch 64] [--reps 3]
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

from herdbench.cluster import LocalCluster, build, share_trainers_openblas_kernels
from herdbench.herd_vs_ddp import make_torchscript, run_ddp, run_herd, unknown_model


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mnist_cnn,mlp")
    p.add_argument("--worlds", default="1,2")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--bin-dir", help="use binaries already built there instead of building (bazel-bin)")
    args = p.parse_args()
    if args.steps % args.warmup:
        p.error("--steps must be a multiple of --warmup (herd logs every --warmup steps)")
    bin_dir = args.bin_dir or build()
    openblas = share_trainers_openblas_kernels(bin_dir)
    models = args.models.split(",")
    for model in models:
        if unknown_model(model):
            p.error(f"--models: {unknown_model(model)}")
    args.torchscript = make_torchscript(tempfile.mkdtemp(prefix="herd-bench-ts-")) if "torchscript" in models else None
    worlds = [int(w) for w in args.worlds.split(",")]
    samples = {}  # (model, world, side) -> [samples/s]
    print(f"# {datetime.datetime.now().isoformat(timespec='seconds')} {os.cpu_count()} cores, "
          f"batch {args.batch}/worker, {args.warmup} warmup + {args.steps} timed steps, {args.reps} reps, "
          f"OpenBLAS kernels {openblas or 'n/a'} (both sides)")
    for world in worlds:
        cluster = LocalCluster(bin_dir, world)
        try:
            for rep in range(args.reps):
                for model in models:
                    # Alternate the order so neither side always runs second.
                    sides = ["herd", "ddp"] if rep % 2 == 0 else ["ddp", "herd"]
                    for side in sides:
                        sps, loss = run_herd(cluster, model, world, args) if side == "herd" else \
                            run_ddp(model, world, args)
                        samples.setdefault((model, world, side), []).append(sps)
                        print(f"rep {rep} {model:10s} W={world} {side:5s} {sps:9.1f} samples/s  loss {loss:.3f}",
                              flush=True)
        finally:
            cluster.stop()

    summary = {}
    print(f"\n{'model':10s} {'W':>2s} {'herd':>10s} {'ddp':>10s} {'herd/ddp':>9s}")
    for model in models:
        summary[model] = {}
        for world in worlds:
            herd = statistics.median(samples[(model, world, "herd")])
            ddp = statistics.median(samples[(model, world, "ddp")])
            summary[model][f"w{world}"] = {"herd_samples_per_s": round(herd, 1), "ddp_samples_per_s": round(ddp, 1),
                                           "ratio": round(herd / ddp, 3)}
            print(f"{model:10s} {world:2d} {herd:10.1f} {ddp:10.1f} {herd / ddp:9.3f}")
        if 1 in worlds and 2 in worlds:
            for side in ("herd", "ddp"):
                eff = summary[model]["w2"][f"{side}_samples_per_s"] / (2 * summary[model]["w1"][f"{side}_samples_per_s"])
                summary[model][f"{side}_scaling_efficiency"] = round(eff, 3)
            print(f"{model:10s} scaling efficiency W=2 vs W=1: herd {summary[model]['herd_scaling_efficiency']:.3f}"
                  f"  ddp {summary[model]['ddp_scaling_efficiency']:.3f}")
    print(json.dumps({"benchmark": "herd_vs_ddp", "batch": args.batch, "steps": args.steps, "reps": args.reps,
                      "results": summary}))


if __name__ == "__main__":
    sys.exit(main())
