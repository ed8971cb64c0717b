#!/usr/bin/env python3
"""Profiles one trainer of a real herd job with perf (cpu-clock sampling).

Starts a local coordinator and W worker daemons (as compare_ddp.py does),
submits a Fashion-MNIST job, records one trainer with call graphs and the
whole machine without, and prints the top symbols and the share of idle CPU
(`swapper`). That is how the bucket-layout and page-fault costs in
bench/README.md were found.

Usage: bench/profile_trainer.py [--model mlp] [--world 2] [--batch 64] [--steps 600] [--seconds 8]
Needs: perf (Debian linux-perf), binaries built (scripts/bazel.sh build ...).
"""
import argparse
import json
import os
import subprocess
import sys
import time

from herdbench.cluster import FASHION_MNIST, LocalCluster, build


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mlp")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--batch", type=int, default=64, help="per worker")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--bin-dir", default=None, help="herd binaries (default: bazel-bin)")
    args = p.parse_args()
    bin_dir = args.bin_dir or build()
    cluster = LocalCluster(bin_dir, args.world)
    try:
        spec = (f"model: {args.model}\ndataset: {{kind: idx, path: {FASHION_MNIST}}}\nbatch_size: {args.batch}\n"
                f"max_steps: {args.steps}\noptimizer: {{name: sgd, lr: 0.05, momentum: 0.9}}\nthreads: 1\n"
                f"log_interval_steps: 10\neval: {{max_samples: 256}}\nmin_workers: {args.world}\n"
                f"max_workers: {args.world}\nseed: 1\n")
        path = os.path.join(cluster.dir, "job.yaml")
        with open(path, "w") as f:
            f.write(spec)
        job = json.loads(cluster.herd("submit", path, "-o", "json"))["id"]
        while json.loads(cluster.herd("status", job, "-o", "json")).get("step", 0) < 20:
            time.sleep(0.5)
        pid = subprocess.run(["pgrep", "-f", f"herd-trainer .*--job={job}"], capture_output=True,
                             text=True).stdout.split()[0]
        trainer_data = os.path.join(cluster.dir, "trainer.perf")
        machine_data = os.path.join(cluster.dir, "machine.perf")
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o", trainer_data,
                        "-p", pid, "--", "sleep", str(args.seconds)], check=True)
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-a", "-o", machine_data,
                        "--", "sleep", str(args.seconds)], check=True)
        for title, data, sort in (("trainer pid " + pid, trainer_data, "dso,sym"),
                                  ("trainer pid " + pid + " by library", trainer_data, "dso"),
                                  ("whole machine", machine_data, "comm")):
            report = subprocess.run(["perf", "report", "-i", data, "--no-children", "-g", "none", "--sort", sort,
                                     "--stdio"], capture_output=True, text=True).stdout
            lines = [l for l in report.splitlines() if l.strip() and not l.startswith("#")][:20]
            print(f"== {title}\n" + "\n".join(lines))
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
