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
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = re.compile(r"(all-reduce|averaging): (\d+) (?:steps|rounds), (\d+) bytes sent \(([0-9.]+) bytes/sample\)"
                     r".*?(\d+) samples in ([0-9.]+) s of training")
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def wait_for_file(path, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {path}")


class Cluster:
    def __init__(self, bin_dir, workers=2):
        self.bin = bin_dir
        self.run = tempfile.mkdtemp(prefix="herd-avg-bench.")
        self.procs = []
        # One token per principal (this script as a user, the workers); the
        # coordinator's auth file holds their SHA-256s.
        token, worker_token = os.path.join(self.run, "user-token"), os.path.join(self.run, "worker-token")
        auth = os.path.join(self.run, "auth")
        lines = []
        for path, entry in ((token, "bench user"), (worker_token, "bench-workers worker")):
            secret = secrets.token_hex(32)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(secret)
            lines.append(f"{entry} sha256:{hashlib.sha256(secret.encode()).hexdigest()}")
        lines[1] += " worker-*"
        with open(os.open(auth, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("\n".join(lines) + "\n")
        ready = os.path.join(self.run, "coordinator.json")
        self._start([f"{bin_dir}/coordinator/herd-coordinator", "--listen=127.0.0.1:0",
                     "--metrics-listen=127.0.0.1:0", f"--state-dir={self.run}/state", f"--auth-file={auth}",
                     f"--ready-file={ready}"], "coordinator.log")
        wait_for_file(ready)
        with open(ready) as f:
            address = json.load(f)["listen"]
        self.env = dict(os.environ, HERD_COORDINATOR=address, HERD_TOKEN_FILE=token)
        for i in range(workers):
            self._start([f"{bin_dir}/worker/daemon/herd-worker", f"--coordinator={address}",
                         f"--token-file={worker_token}", f"--worker-id=worker-{i}", f"--work-dir={self.run}/worker-{i}",
                         "--metrics-listen=127.0.0.1:0", f"--trainer-binary={bin_dir}/worker/train/herd-trainer",
                         f"--ready-file={self.run}/worker-{i}.json"], f"worker-{i}.log")
        for i in range(workers):
            wait_for_file(f"{self.run}/worker-{i}.json")
        self.workers = workers

    def _start(self, argv, log):
        out = open(os.path.join(self.run, log), "w")
        self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT))

    def herd(self, *args):
        result = subprocess.run([f"{self.bin}/client/herd", *args, "-o", "json"], env=self.env,
                                capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"herd {' '.join(args)}: {result.stderr}")
        return json.loads(result.stdout)

    def run_job(self, yaml, timeout=3600):
        path = os.path.join(self.run, f"job-{time.time_ns()}.yaml")
        with open(path, "w") as f:
            f.write(yaml)
        job_id = self.herd("submit", path)["id"]
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                job = self.herd("status", job_id)
            except RuntimeError as e:  # a busy coordinator on a loaded machine: poll again
                print(f"(retrying) {e}", file=sys.stderr)
                time.sleep(1)
                continue
            if job.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
                if job["state"] != "SUCCEEDED":
                    raise RuntimeError(f"job {job_id} {job['state']}: {job.get('reason')} (logs in {self.run})")
                return job_id
            time.sleep(0.5)
        raise RuntimeError(f"job {job_id} did not finish in {timeout} s")

    def summaries(self, job_id):
        out = []
        for i in range(self.workers):
            with open(f"{self.run}/worker-{i}/jobs/{job_id}/trainer.log") as f:
                m = SUMMARY.search(f.read())
            if not m:
                raise RuntimeError(f"no sync summary in worker-{i}'s trainer.log for {job_id}")
            out.append({"bytes": int(m.group(3)), "bytes_per_sample": float(m.group(4)),
                        "samples": int(m.group(5)), "seconds": float(m.group(6))})
        return out

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def job_yaml(model, steps, sync):
    return (f"model: {model}\n"
            f"dataset: {{kind: idx, path: {FASHION_MNIST}}}\n"
            "batch_size: 64\n"
            f"max_steps: {steps}\n"
            "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
            f"sync: {sync}\n"
            "eval: {max_samples: 512}\n"
            "min_workers: 2\nmax_workers: 2\nseed: 1\nthreads: 1\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    cluster = Cluster(os.path.realpath(args.bin))
    # Interleaved repeats: load from other processes drifts over minutes, and
    # should not favour whichever configuration ran last.
    runs = {i: [] for i in range(len(configs))}
    try:
        for repeat in range(args.repeats):
            for i, (mode, every, sync) in enumerate(configs):
                job_id = cluster.run_job(job_yaml(args.model, args.steps, sync))
                ranks = cluster.summaries(job_id)
                samples = sum(r["samples"] for r in ranks)
                seconds = max(r["seconds"] for r in ranks)
                runs[i].append({"samples_per_s": samples / seconds, "bytes_per_sample": ranks[0]["bytes_per_sample"],
                                "bytes_rank0": ranks[0]["bytes"]})
                r = runs[i][-1]
                print(f"[{repeat + 1}/{args.repeats}] {mode:9} K={every:<3} {r['samples_per_s']:8.1f} samples/s "
                      f"{r['bytes_per_sample']:10.1f} bytes/sample ({r['bytes_rank0']} bytes by rank 0)", flush=True)
    finally:
        cluster.stop()
        print(f"logs and state kept in {cluster.run}", file=sys.stderr)
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
    print(json.dumps({"bench": "averaging", "model": args.model, "workers": 2, "batch_size": 64,
                      "steps": args.steps, "repeats": args.repeats, "load_average_1m": os.getloadavg()[0],
                      "results": results}))


if __name__ == "__main__":
    main()
