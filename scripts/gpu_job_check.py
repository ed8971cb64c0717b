#!/usr/bin/env python3
"""One herd job end to end on a device, for scripts/gpu_check.sh: a local
coordinator, one worker daemon (`--device=DEVICE`) and the `herd` CLI, all
from BIN_DIR (bazel-bin's layout), run a small mlp job on synthetic data
(`device: DEVICE`). Passes when the job SUCCEEDED, its loss is a finite
number and the worker wrote the trained model (model-final.pt); when the
same job with `cuda_graphs: true` SUCCEEDED too, its steps captured as a
CUDA graph on cuda (and run eagerly, saying why, on cpu) and its loss
within 1% of the eager job's (the same kernels on the same data: only
float reassociation differs); and (on cuda) when a job whose first step
needs 262 GB of activations FAILED at once with a reason naming out of
memory and the training step.

Prints one JSON line: ok, job, state, loss, seconds, samples_per_s (rank 0's
last progress line), graphs (the captured job's part) and, on failure, the
error. Exit status 0 ok, 1 not.

Usage: PYTHONPATH=bench scripts/gpu_job_check.py --bin-dir BUNDLE/bin [--lib-dir BUNDLE/lib] [--device cuda|cpu]
(PYTHONPATH: the local cluster is bench's, bench/herdbench/cluster.py; scripts/gpu_check.sh sets it.)
"""
import argparse
import json
import math
import os
import re
import signal
import sys
import time

from herdbench.cluster import LocalCluster

# Rank 0's progress lines; the "(final)" one comes after the final evaluation, so its rate says less.
PROGRESS = re.compile(r" step (\d+)/(\d+) epoch \d+ loss \S+ (\d+) samples/s$", re.M)


def spec(device, steps, cuda_graphs=False):
    return (f"name: gpu-check-mlp{'-graphs' if cuda_graphs else ''}\nmodel: mlp\ncuda_graphs: {str(cuda_graphs).lower()}\n"
            "dataset: {kind: synthetic, synthetic_samples: 8192, synthetic_features: 784, synthetic_classes: 10}\n"
            f"batch_size: 64\nmax_steps: {steps}\noptimizer: {{name: sgd, lr: 0.05, momentum: 0.9}}\n"
            f"log_interval_steps: 20\neval: {{max_samples: 512}}\ndevice: {device}\nseed: 1\n")


CAPTURED = "cuda_graphs: capturing the step as a CUDA graph"
EAGER = "cuda_graphs: running eagerly ("


def trainer_log(cluster, info, job):
    with open(os.path.join(cluster.dir, info["workers"][0], "jobs", job, "trainer.log")) as f:
        return f.read()


def check_graphs(cluster, device, steps, eager_loss, timeout):
    """The eager job again with cuda_graphs: true. On cuda its steps must be captured (no fallback) and its loss
    within 1% of the eager job's; on cpu it must run eagerly and say why. Returns the part of the JSON line."""
    try:
        job, info = cluster.run_job(spec(device, steps, cuda_graphs=True), timeout=timeout)
    except RuntimeError as e:
        return {"ok": False, "error": str(e)[:1500]}
    log = trainer_log(cluster, info, job)
    part = {"job": job, "state": info["state"], "loss": info.get("loss"), "captured": CAPTURED in log,
            "fallback": next((line[line.index(EAGER):][:200] for line in log.splitlines() if EAGER in line), None)}
    loss = part["loss"]
    if not isinstance(loss, (int, float)) or not math.isfinite(loss):
        part["error"] = f"loss {loss!r} is not a finite number"
    elif device == "cuda" and (not part["captured"] or part["fallback"]):
        part["error"] = f"the step was not captured: {part['fallback'] or 'no capture line in trainer.log'}"
    elif device == "cuda" and abs(loss - eager_loss) > 0.01 * abs(eager_loss):
        part["error"] = f"loss {loss} is more than 1% off the eager job's {eager_loss}"
    elif device != "cuda" and not part["fallback"]:
        part["error"] = "a cpu job asked for cuda_graphs without saying it runs eagerly"
    part["ok"] = "error" not in part
    return part


def oom_spec(device):
    # One step's first activation is 1,000,000 x 65,536 floats (262 GB): more than any GPU holds. The
    # parameters (1.7 M) and the data set (16 features a sample) are small, so the failure is the step's.
    return (f"name: gpu-check-oom\nmodel: {{name: mlp, hidden: [65536]}}\n"
            "dataset: {kind: synthetic, synthetic_samples: 1000000, synthetic_features: 16, synthetic_classes: 10}\n"
            f"batch_size: 1000000\nmax_steps: 3\noptimizer: {{name: sgd, lr: 0.05}}\n"
            f"log_interval_steps: 1\neval: {{max_samples: 16}}\ndevice: {device}\nseed: 1\n")


def check_oom(cluster, device, timeout):
    """A job whose step cannot fit in GPU memory must FAIL at once, its reason naming out of memory and the step
    (never a silent retry loop). Returns the part of the JSON line."""
    try:
        job, info = cluster.run_job(oom_spec(device), timeout=timeout)
        return {"ok": False, "error": f"job {job} {info['state']}: a 262 GB activation did not fail it"}
    except RuntimeError as e:
        reason = str(e)
    ok = "FAILED" in reason and "out of memory" in reason.lower() and "training step" in reason
    return {"ok": ok, "reason": reason[:600]} if ok else {"ok": False, "error": reason[:1500]}


def main():
    # A SIGTERM (gpu_check.sh's timeout) still stops the daemons, which run in their own sessions.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--lib-dir", help="shared libraries for herd's processes (LD_LIBRARY_PATH)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--timeout", type=float, default=120, help="seconds the job may take")
    a = p.parse_args()
    env = None
    if a.lib_dir:
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.realpath(a.lib_dir))
    result = {"ok": False, "device": a.device}
    start = time.time()
    cluster = None
    try:
        cluster = LocalCluster(os.path.realpath(a.bin_dir), 1, env=env, worker_args=lambda i: [f"--device={a.device}"])
        result["logs"] = cluster.dir
        job, info = cluster.run_job(spec(a.device, a.steps), timeout=a.timeout)
        result.update(job=job, state=info["state"], loss=info.get("loss"))
        job_dir = os.path.join(cluster.dir, info["workers"][0], "jobs", job)
        progress = PROGRESS.findall(trainer_log(cluster, info, job))
        if progress:
            result["samples_per_s"] = int(progress[-1][2])
        if not isinstance(result["loss"], (int, float)) or not math.isfinite(result["loss"]):
            result["error"] = f"loss {result['loss']!r} is not a finite number"
        elif not os.path.isfile(os.path.join(job_dir, "model-final.pt")):
            result["error"] = f"no model-final.pt in {job_dir}"
        else:
            result["graphs"] = check_graphs(cluster, a.device, a.steps, result["loss"], a.timeout)
            if not result["graphs"]["ok"]:
                result["error"] = "cuda_graphs job: " + result["graphs"]["error"]
            elif a.device == "cuda":
                # The CPU dry run skips it: a CPU allocation that large is refused or overcommitted by the OS.
                result["oom"] = check_oom(cluster, a.device, a.timeout)
                result["ok"] = result["oom"]["ok"]
                if not result["ok"]:
                    result["error"] = "out-of-memory job: " + result["oom"].get("error", "")
            else:
                result["ok"] = True
    except Exception as e:  # noqa: BLE001 - reported in the JSON line
        result["error"] = f"{type(e).__name__}: {e}"[-2000:]
    finally:
        if cluster:
            cluster.stop()
    result["seconds"] = round(time.time() - start, 1)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
