#!/usr/bin/env python3
"""herd against PyTorch DDP, side by side, in one run.

For each model and world size (1, 2) it alternates a herd run (a real local
coordinator + W worker daemons + trainers over Gloo) and a PyTorch DDP run
(../shared/bench/ddp_baseline.py, gloo, CPU), several times,
with the same model, per-worker batch, optimizer (SGD lr 0.05 momentum 0.9),
one intra-op thread per worker, the same warmup and timed steps, on
Fashion-MNIST. Each side's samples/s is measured the same way: wall time over
the timed steps only (herd: between rank 0's commit-point log lines at the
first and last timed step; DDP: between barriers).

Models: mnist_cnn and mlp (the shared peer's), and two compute-bound ones
that DDP runs with bench/ddp_peer.py: mlp_4096 (herd's mlp with `hidden:
[4096, 4096]`) and torchscript (a residual 2048-wide MLP saved as TorchScript,
the same file loaded by both sides).

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
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The shared DDP peer; HERD_DDP_BASELINE names it where it lies elsewhere
# (scripts/straggler_on_device.sh on a machine without ../shared).
DDP_SCRIPT = os.environ.get("HERD_DDP_BASELINE") or os.path.join(ROOT, "..", "shared", "bench", "ddp_baseline.py")
DDP_PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives there
DATA = "/usr/share/datasets/fashion-mnist"
DDP_MODEL = {"mnist_cnn": "cnn", "mlp": "mlp"}  # the shared peer's names
DDP_PEER = os.path.join(ROOT, "bench", "ddp_peer.py")  # ours, for the other models
# Compute-bound cases: a sized built-in model, and a user's TorchScript module
# (bench/make_residual_mlp.py) that both sides load from the same file.
SIZED_MLP = {"mlp_4096": [4096, 4096]}


def make_torchscript(directory):
    path = os.path.join(directory, "residual_mlp.pt")
    subprocess.run([DDP_PYTHON, os.path.join(ROOT, "bench", "make_residual_mlp.py"), path], check=True)
    return path


def herd_model(model, torchscript):
    if model in SIZED_MLP:
        return f"{{name: mlp, hidden: {SIZED_MLP[model]}}}"
    if model == "torchscript":
        return f"{{name: torchscript, path: {torchscript}}}"
    return model


def ddp_command(model, torchscript):
    if model in SIZED_MLP:
        return [DDP_PEER, "--model", "mlp:" + "x".join(str(w) for w in SIZED_MLP[model])]
    if model == "torchscript":
        return [DDP_PEER, "--model", "torchscript:" + torchscript]
    return [DDP_SCRIPT, "--model", DDP_MODEL[model]]


def build():
    subprocess.run([os.path.join(ROOT, "scripts", "bazel.sh"), "build", "//coordinator:herd-coordinator",
                    "//worker/daemon:herd-worker", "//worker/train:herd-trainer", "//client:herd"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.run(["bazel", "info", "bazel-bin"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def env_with_libs(lib_dir):
    """The environment for herd's processes with `lib_dir` first on LD_LIBRARY_PATH (a GPU bundle's lib/);
    None (inherit) without one. Never for Python: the bundle's libraries are herd's."""
    if not lib_dir:
        return None
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.realpath(lib_dir) + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def share_trainers_openblas_kernels(bin_dir, lib_dir=None):
    """Puts the OpenBLAS kernels herd's trainers run on (herd-trainer --probe-openblas) in OPENBLAS_CORETYPE for
    every process this bench starts, the DDP side's included: a trainer forces better kernels where OpenBLAS takes
    the CPU for a generic core (worker/train/optim/openblas_kernels.h), and a peer left on those would be no peer.
    Returns their name ("": not OpenBLAS, e.g. a GPU machine's LibTorch)."""
    out = subprocess.run([os.path.join(bin_dir, "worker", "train", "herd-trainer"), "--probe-openblas"],
                         capture_output=True, text=True, env=env_with_libs(lib_dir), check=True).stdout
    core = out.strip().partition("openblas_core")[2].strip()
    if core:
        os.environ["OPENBLAS_CORETYPE"] = core
    return core


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """A coordinator and `world` worker daemons, on loopback by default.

    `host` is the coordinator's address; `worker_hosts[i]` (listen address)
    and `worker_prefix(i)` (e.g. a testbed's `exec` into host i) place worker
    i elsewhere, as bench/wan_bench.py does with network-namespace hosts.
    `worker_args(i)` adds flags to worker i (bench/gpu_bench.py: `--device=cuda`,
    `--metrics-listen=127.0.0.1:0`; a `--metrics-listen` there replaces the
    default, which turns metrics off). `env`, if given, is the environment of
    every herd process, the CLI's included (e.g. LD_LIBRARY_PATH for a bundle)."""

    def __init__(self, bin_dir, world, host="127.0.0.1", worker_hosts=None, worker_prefix=lambda i: [],
                 worker_args=lambda i: [], env=None):
        self.bin = bin_dir
        self.env = env
        self.dir = tempfile.mkdtemp(prefix="herd-bench-")
        self.procs = []
        self.names = []
        self.address = f"{host}:{free_port()}"
        try:
            self._start_all(bin_dir, world, worker_hosts, worker_prefix, worker_args)
        except BaseException:
            self.stop()  # no daemon outlives a cluster that failed to start
            raise

    def _start_all(self, bin_dir, world, worker_hosts, worker_prefix, worker_args):
        self.start_coordinator()
        self.worker_argv = []
        for i in range(world):
            listen = [f"--listen={worker_hosts[i]}"] if worker_hosts else []
            extra = list(worker_args(i))
            metrics = [] if any(a.startswith("--metrics-listen") for a in extra) else ["--metrics-listen="]
            self.worker_argv.append(worker_prefix(i) + [
                f"{bin_dir}/worker/daemon/herd-worker", f"--coordinator={self.address}",
                f"--worker-id=worker-{i}", f"--work-dir={self.dir}/worker-{i}", *listen, *metrics,
                "--insecure-no-auth", f"--trainer-binary={bin_dir}/worker/train/herd-trainer",
                f"--ready-file={self.dir}/worker-{i}.json", *extra])
            self._start(self.worker_argv[i], f"worker-{i}")
        for i in range(world):
            self._wait_ready(f"{self.dir}/worker-{i}.json")

    def restart_worker(self, i, wait=True):
        """Starts worker i's daemon again (after a kill: same id and work dir) as procs[1 + i]."""
        ready = f"{self.dir}/worker-{i}.json"
        if os.path.exists(ready):
            os.remove(ready)
        log = open(os.path.join(self.dir, f"worker-{i}.log"), "a")
        self.procs[1 + i] = subprocess.Popen(self.worker_argv[i], stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, env=self.env)
        if wait:
            self._wait_ready(ready, watch=[(self.procs[1 + i], f"worker-{i}")])

    def _wait_ready(self, path, timeout=60, watch=None):
        """Waits for a ready file; a watched herd process (default: all of them) that exits meanwhile (a
        missing shared library, a bad flag) fails the wait at once, with its log's tail. A restart watches
        only the process it started: others may have been killed on purpose."""
        deadline = time.time() + timeout
        watched = list(zip(self.procs, self.names)) if watch is None else watch
        while not (os.path.exists(path) and os.path.getsize(path) > 0):
            for p, name in watched:
                if p.poll() is not None:
                    with open(os.path.join(self.dir, name + ".log")) as f:
                        tail = f.read()[-2000:]
                    raise RuntimeError(f"{name} exited with status {p.returncode} before it was ready: {tail}")
            if time.time() > deadline:
                raise RuntimeError(f"timed out waiting for {path}")
            time.sleep(0.05)

    def start_coordinator(self):
        """Starts the coordinator as procs[0] (again, after a kill: same
        address and state dir, so the workers find it and it recovers)."""
        ready = f"{self.dir}/coordinator.json"
        if os.path.exists(ready):
            os.remove(ready)
        argv = [f"{self.bin}/coordinator/herd-coordinator", f"--listen={self.address}", "--metrics-listen=",
                f"--state-dir={self.dir}/state", "--insecure-no-auth", f"--ready-file={ready}"]
        log = open(os.path.join(self.dir, "coordinator.log"), "a")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=self.env)
        if self.procs:
            self.procs[0] = proc
        else:
            self.procs.append(proc)
            self.names.append("coordinator")
        self._wait_ready(ready, watch=[(proc, "coordinator")])

    def _start(self, argv, name):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        self.names.append(name)
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                           env=self.env))

    def herd(self, *args):
        out = subprocess.run([f"{self.bin}/client/herd", "--coordinator", self.address, "--insecure-no-auth",
                              *args], capture_output=True, text=True, env=self.env)
        if out.returncode != 0:
            raise RuntimeError(f"herd {' '.join(args)}: {out.stderr}")
        return out.stdout

    def herd_json(self, *args):
        return json.loads(self.herd(*args, "-o", "json"))

    def run_job(self, spec, timeout=3600):
        """Submits the YAML `spec`, waits for the job to end; returns (id, status). Raises unless it succeeded."""
        path = os.path.join(self.dir, f"job-{time.time_ns()}.yaml")
        with open(path, "w") as f:
            f.write(spec)
        job = self.herd_json("submit", path)["id"]
        deadline = time.time() + timeout
        failures = 0
        while True:
            try:
                info = self.herd_json("status", job)
                failures = 0
            except RuntimeError:
                failures += 1  # a loaded 2-core machine can starve the coordinator for a moment
                if failures > 20:
                    raise
                time.sleep(1)
                continue
            if info["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
            if time.time() > deadline:
                raise RuntimeError(f"job {job} did not finish in {timeout} s (logs in {self.dir})")
            time.sleep(0.5)
        if info["state"] != "SUCCEEDED":
            raise RuntimeError(f"job {job} {info['state']}: {info.get('reason')} (logs in {self.dir})")
        return job, info

    def stop(self):
        # SIGINT: a worker daemon stops at once (SIGTERM would drain its jobs first, up to
        # --drain-timeout-seconds, which a bench cut short by a timeout has no time for).
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


LOG_TIME = re.compile(r"^I\d{8} (\d\d):(\d\d):(\d\d\.\d+) .* step (\d+)/\d+ ")


def step_times(trainer_log):
    """{step: seconds-of-day} from rank 0's commit-point log lines. The first line of a step counts:
    the last step logs again, "(final)", after the final evaluation and the model's save."""
    times = {}
    with open(trainer_log) as f:
        for line in f:
            m = LOG_TIME.match(line)
            if m:
                h, mi, s, step = int(m.group(1)), int(m.group(2)), float(m.group(3)), int(m.group(4))
                times.setdefault(step, h * 3600 + mi * 60 + s)
    return times


def run_herd(cluster, model, world, args):
    spec = (f"name: bench-{model}-w{world}\nmodel: {herd_model(model, args.torchscript)}\n"
            f"dataset: {{kind: idx, path: {DATA}}}\n"
            f"batch_size: {args.batch}\nmax_steps: {args.warmup + args.steps}\n"
            f"optimizer: {{name: sgd, lr: 0.05, momentum: 0.9}}\n"
            f"threads: 1\nlog_interval_steps: {args.warmup}\neval: {{max_samples: 256}}\n"
            f"min_workers: {world}\nmax_workers: {world}\nseed: 1\n"
            f"{getattr(args, 'herd_spec_extra', '')}")
    job, info = cluster.run_job(spec, timeout=1800)
    rank0 = info["workers"][0]
    times = step_times(os.path.join(cluster.dir, rank0, "jobs", job, "trainer.log"))
    start, end = times[args.warmup], times[args.warmup + args.steps]
    if end < start:
        end += 86400  # crossed midnight
    return args.steps * args.batch * world / (end - start), info.get("loss", 0.0)


def run_ddp(model, world, args):
    result = run_ddp_result(model, world, args)
    return result["samples_per_s"], result["loss"]


def run_ddp_result(model, world, args):
    """The DDP peer's result line (bench/ddp_peer.py), as a dict."""
    python = getattr(args, "python", None) or DDP_PYTHON  # straggler_bench --python
    out = subprocess.run([python, *ddp_command(model, args.torchscript), "--world", str(world),
                          "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
                          "--threads", "1", "--port", str(free_port())], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"DDP peer failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
        if model not in DDP_MODEL and model not in SIZED_MLP and model != "torchscript":
            p.error(f"--models: unknown {model!r} (known: {', '.join([*DDP_MODEL, *SIZED_MLP, 'torchscript'])})")
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
