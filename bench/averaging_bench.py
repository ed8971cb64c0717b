#!/usr/bin/python3
"""Sync mode `average` against `allreduce`: throughput and bytes on the wire.

Starts a local herd cluster (coordinator + 2 workers on loopback, real
binaries), runs the same job with sync mode allreduce and with parameter
averaging every K in {1, 4, 16} steps, one after another, and reads each
trainer's end-of-training summary line:
  all-reduce: N steps, B bytes sent (X bytes/sample); S samples in T s of training (...)
  averaging: R rounds, B bytes sent (X bytes/sample); ...; S samples in T s of training (...)
Bytes are buffer bytes handed to all-reduce by one rank (the same count in
both modes); samples/s is all ranks' samples over the slowest rank's
training time (evaluation and start-up excluded).

Usage: bench/averaging_bench.py [--steps 96] [--repeats 2] [--model mnist_cnn] [--bin bazel-bin]
Build first: scripts/bazel.sh build //coordinator:herd-coordinator \
  //worker/daemon:herd-worker //worker/train:herd-trainer //client:herd
Prints a table, then one JSON line.
"""
import argparse
import json
import os
import sys

from herdbench.cluster import FASHION_MNIST, ROOT, LocalCluster
from herdbench.trainer_logs import SUMMARY

WORKERS = 2


def summaries(cluster, job_id, workers):
    """Each rank's end-of-training sync summary line, parsed."""
    out = []
    for i in range(workers):
        with open(f"{cluster.dir}/worker-{i}/jobs/{job_id}/trainer.log") as f:
            m = SUMMARY.search(f.read())
        if not m:
            raise RuntimeError(f"no sync summary in worker-{i}'s trainer.log for {job_id}")
        out.append({"bytes": int(m.group(3)), "bytes_per_sample": float(m.group(4)),
                    "samples": int(m.group(5)), "seconds": float(m.group(6))})
    return out


def job_yaml(model, steps, sync):
    return (f"model: {model}\n"
            f"dataset: {{kind: idx, path: {FASHION_MNIST}}}\n"
            "batch_size: 64\n"
            f"max_steps: {steps}\n"
            "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
            f"sync: {sync}\n"
            "eval: {max_samples: 512}\n"
            f"min_workers: {WORKERS}\nmax_workers: {WORKERS}\nseed: 1\nthreads: 1\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=96, help="optimizer steps per run (a multiple of 16)")
    parser.add_argument("--model", default="mnist_cnn")
    parser.add_argument("--bin", default=os.path.join(ROOT, "bazel-bin"), help="folder with the built binaries")
    parser.add_argument("--repeats", type=int, default=2,
                        help="rounds over all configurations, interleaved; samples/s is the median")
    args = parser.parse_args()
    if not os.path.isdir(FASHION_MNIST):
        sys.exit(f"{FASHION_MNIST} is missing (apt-get install dataset-fashion-mnist)")

    configs = [("allreduce", 0, "{mode: allreduce}")] + [
        ("average", k, f"{{mode: average, every: {k}}}") for k in (1, 4, 16)]
    cluster = LocalCluster(os.path.realpath(args.bin), WORKERS)
    # Interleaved repeats: load from other processes drifts over minutes, and
    # should not favour whichever configuration ran last.
    runs = {i: [] for i in range(len(configs))}
    try:
        for repeat in range(args.repeats):
            for i, (mode, every, sync) in enumerate(configs):
                job_id, _ = cluster.run_job(job_yaml(args.model, args.steps, sync))
                ranks = summaries(cluster, job_id, WORKERS)
                samples = sum(r["samples"] for r in ranks)
                seconds = max(r["seconds"] for r in ranks)
                runs[i].append({"samples_per_s": samples / seconds, "bytes_per_sample": ranks[0]["bytes_per_sample"],
                                "bytes_rank0": ranks[0]["bytes"]})
                r = runs[i][-1]
                print(f"[{repeat + 1}/{args.repeats}] {mode:9} K={every:<3} {r['samples_per_s']:8.1f} samples/s "
                      f"{r['bytes_per_sample']:10.1f} bytes/sample ({r['bytes_rank0']} bytes by rank 0)", flush=True)
    finally:
        cluster.stop()
        print(f"logs and state kept in {cluster.dir}", file=sys.stderr)
    results = []
    for i, (mode, every, _) in enumerate(configs):
        rates = sorted(r["samples_per_s"] for r in runs[i])
        median = (rates[(len(rates) - 1) // 2] + rates[len(rates) // 2]) / 2
        results.append({"mode": mode, "every": every, "samples_per_s": round(median, 1),
                        "samples_per_s_runs": [round(x, 1) for x in rates],
                        "bytes_per_sample": runs[i][0]["bytes_per_sample"], "bytes_rank0": runs[i][0]["bytes_rank0"]})
    base = results[0]["bytes_per_sample"]
    for r in results:
        r["bytes_reduction"] = round(base / r["bytes_per_sample"], 2) if r["bytes_per_sample"] > 0 else None
    for r in results:
        print(f"{r['mode']:9} K={r['every']:<3} median {r['samples_per_s']:8.1f} samples/s "
              f"{r['bytes_per_sample']:10.1f} bytes/sample ({r['bytes_reduction']}x fewer than allreduce)")
    print(json.dumps({"bench": "averaging", "model": args.model, "workers": WORKERS, "batch_size": 64,
                      "steps": args.steps, "repeats": args.repeats, "load_average_1m": os.getloadavg()[0],
                      "results": results}))


if __name__ == "__main__":
    main()
