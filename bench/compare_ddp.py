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

With --before-bin-dir DIR (e.g. an older commit's bazel-bin) herd also runs
from DIR, on a cluster of its own, in the same rotation: each repetition runs
herd (current), herd before and DDP one after another, each in a different
place of the order every repetition, so both herds see the same machine.

Prints one line per run, a summary table, and a final JSON line with the
medians, the herd/DDP ratio (and before/DDP, herd/before), and each side's
scaling efficiency (samples/s at W=2 divided by twice the samples/s at W=1).

Usage: bench/compare_ddp.py [--models mnist_cnn,mlp,mlp_4096,torchscript] [--worlds 1,2]
                            [--steps 100] [--warmup 10] [--batch 64] [--reps 3]
                            [--bin-dir DIR] [--before-bin-dir DIR]
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

from herdbench.cluster import LocalCluster, build, missing_binaries, share_trainers_openblas_kernels
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
    p.add_argument("--before-bin-dir", metavar="DIR",
                   help="also run herd from the binaries in DIR (e.g. an older commit's bazel-bin), alternating "
                        "with the current ones in every repetition; prints before, after and after/before")
    args = p.parse_args()
    if args.steps % args.warmup:
        p.error("--steps must be a multiple of --warmup (herd logs every --warmup steps)")
    for flag, directory in (("--bin-dir", args.bin_dir), ("--before-bin-dir", args.before_bin_dir)):
        if directory and missing_binaries(directory):
            p.error(f"{flag}: no {', '.join(missing_binaries(directory))} in {directory}")
    bin_dirs = {"herd": args.bin_dir or build()}  # side -> the herd binaries it runs
    if args.before_bin_dir:
        bin_dirs["before"] = args.before_bin_dir
    openblas = share_trainers_openblas_kernels(bin_dirs["herd"])
    models = args.models.split(",")
    for model in models:
        if unknown_model(model):
            p.error(f"--models: {unknown_model(model)}")
    args.torchscript = make_torchscript(tempfile.mkdtemp(prefix="herd-bench-ts-")) if "torchscript" in models else None
    worlds = [int(w) for w in args.worlds.split(",")]
    sides = [*bin_dirs, "ddp"]
    samples = {}  # (model, world, side) -> [samples/s]
    print(f"# {datetime.datetime.now().isoformat(timespec='seconds')} {os.cpu_count()} cores, "
          f"batch {args.batch}/worker, {args.warmup} warmup + {args.steps} timed steps, {args.reps} reps, "
          f"OpenBLAS kernels {openblas or 'n/a'} (every side)"
          + "".join(f"\n# {side}: {os.path.abspath(d)}" for side, d in bin_dirs.items()))
    for world in worlds:
        clusters = {}
        try:
            for side, directory in bin_dirs.items():
                clusters[side] = LocalCluster(directory, world)
            for rep in range(args.reps):
                for model in models:
                    # Rotate the order so no side always runs in the same place.
                    for side in sides[rep % len(sides):] + sides[:rep % len(sides)]:
                        sps, loss = run_ddp(model, world, args) if side == "ddp" else \
                            run_herd(clusters[side], model, world, args)
                        samples.setdefault((model, world, side), []).append(sps)
                        print(f"rep {rep} {model:10s} W={world} {side:6s} {sps:9.1f} samples/s  loss {loss:.3f}",
                              flush=True)
        finally:
            for cluster in clusters.values():
                cluster.stop()

    summary = {}
    # (column, JSON key, numerator side, denominator side)
    ratios = [("herd/ddp", "ratio", "herd", "ddp")]
    if "before" in bin_dirs:
        ratios += [("before/ddp", "before_ratio", "before", "ddp"),
                   ("herd/before", "after_over_before", "herd", "before")]
    print(f"\n{'model':10s} {'W':>2s}" + "".join(f" {side:>10s}" for side in sides)
          + "".join(f" {column:>11s}" for column, *_ in ratios))
    for model in models:
        summary[model] = {}
        for world in worlds:
            median = {side: statistics.median(samples[(model, world, side)]) for side in sides}
            row = summary[model][f"w{world}"] = {f"{side}_samples_per_s": round(median[side], 1) for side in sides}
            for _, key, over, under in ratios:
                row[key] = round(median[over] / median[under], 3)
            print(f"{model:10s} {world:2d}" + "".join(f" {median[side]:10.1f}" for side in sides)
                  + "".join(f" {row[key]:11.3f}" for _, key, *_ in ratios))
        if 1 in worlds and 2 in worlds:
            for side in sides:
                eff = summary[model]["w2"][f"{side}_samples_per_s"] / (2 * summary[model]["w1"][f"{side}_samples_per_s"])
                summary[model][f"{side}_scaling_efficiency"] = round(eff, 3)
            print(f"{model:10s} scaling efficiency W=2 vs W=1:"
                  + "".join(f"  {side} {summary[model][f'{side}_scaling_efficiency']:.3f}" for side in sides))
    print(json.dumps({"benchmark": "herd_vs_ddp", "batch": args.batch, "steps": args.steps, "reps": args.reps,
                      "results": summary}))


if __name__ == "__main__":
    sys.exit(main())
