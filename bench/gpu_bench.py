#!/usr/bin/env python3
"""herd on a GPU against PyTorch at its best, side by side, in one run.

herd: a real local coordinator, one worker daemon (`--device=cuda`) and its
trainer. PyTorch, in one long-lived Python process (bench/gpu_bench_peer.py)
on the same GPU: eager (the baseline below), DDP (NCCL, world 1), and the
strong peers: `resident` (eager, the dataset on the device, batches indexed
there), `loader` (eager fed by a DataLoader with 2 worker processes and
pin_memory), `compile` (torch.compile, default mode) and `compile_ro`
(torch.compile mode="reduce-overhead": CUDA graphs). For every shape and
precision, each repetition runs the sides one after the other, herd first
on even repetitions and last on odd ones (--peers picks the PyTorch sides).
torch.compile's compile time (its first warmup step) is reported apart
from the timed steps; where this PyTorch has no working torch.compile the
side is reported "unavailable", not failed.

Both sides use the same model, batch, optimizer, data path and timing:
- shapes (batch per step): mlp4096_b256 (MLP 1024-4096-4096-10, 256),
  mlp1024_b64 (MLP 1024-1024-1024-10, 64), both on a synthetic set of 1024
  float features and 10 classes; resnet_small_b128 (herd's resnet_small,
  bench/herdbench/resnet_small.py, 128) on a synthetic 1x28x28 IDX image set
  that both sides read; char_transformer_b64 (bench/herdbench/char_transformer.py,
  64 windows of 64 bytes) on a text file made of the repository's own
  sources. Each fp32 and bf16 (herd: `bf16_autocast: true`; PyTorch:
  torch.autocast('cuda', torch.bfloat16) around forward and loss);
- optimizer: SGD lr 0.05 momentum 0.9, except char_transformer: AdamW lr
  0.001 (herd's defaults: betas 0.9/0.999, eps 1e-8, weight decay 0.01),
  the optimizer a transformer needs; PyTorch's default implementation
  (foreach on CUDA);
- data: a host dataset; each step gathers its batch by the epoch
  permutation, pins it and copies it to the device non_blocking. The set is
  one batch larger than the run, so no epoch ends (and no evaluation runs)
  inside it;
- timing: wall time over the timed steps, synchronized at both ends. herd:
  between rank 0's commit-point log lines at the first and last timed step
  (log_interval_steps = warmup; herd reads the loss on the host there);
  PyTorch: torch.cuda.synchronize() before the start and at the end, the
  loss read at the same points;
- `threads` (herd's spec) = torch.set_num_threads on the PyTorch side.
Memory: peak GPU memory reserved by the caching allocator. PyTorch:
torch.cuda.max_memory_reserved() over the run; herd: the trainer metric
herd_train_device_memory_peak_bytes, scraped from the worker's /metrics
(n/a where the trainer does not export it). The parameter count of every
PyTorch model is checked against the one herd's trainer logs.

Prints one line per run, a table (herd's speed over each side; memory over
the best eager peer's, i.e. the fastest of eager, resident and loader;
against the targets >= 1.1x the best eager peer, <= 1.05x its memory,
>= 1.0x compile_ro, >= 2x the best eager peer on mlp1024_b64), and a final
JSON line. --json-out FILE is rewritten after every run, so a run cut
short still leaves its figures. Exit status 1 if any run failed.

--device cpu runs the same logic on the CPU with small sizes (herd's CPU
build, Debian's python3-torch, DDP over gloo), to keep the script working
on machines without a GPU.

Usage: bench/gpu_bench.py [--device cuda|cpu] [--bin-dir BAZEL_BIN_LAYOUT] [--lib-dir LIBS]
         [--python PY] [--shapes a,b] [--precisions fp32,bf16] [--reps 2] [--peers eager,ddp,...] [--warmup W] [--steps S]
         [--threads T] [--cuda-graphs] [--budget-s SECONDS] [--json-out FILE]
"""
import argparse
import datetime
import json
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from herdbench.cluster import ROOT, LocalCluster, env_with_libs
from herdbench.trainer_logs import step_times

PEER = os.path.join(ROOT, "bench", "gpu_bench_peer.py")
PYTHON = {"cuda": "/opt/torch/.venv/bin/python3", "cpu": "/usr/bin/python3"}
SGD = {"name": "sgd", "lr": 0.05, "momentum": 0.9}
ADAMW = {"name": "adamw", "lr": 0.001, "weight_decay": 0.01}
FEATURES, CLASSES = 1024, 10
# name -> model, data, batch and timed steps on cuda; "cpu" overrides for --device cpu.
SHAPES = {
    "mlp4096_b256": {"model": {"name": "mlp", "hidden": [4096, 4096]}, "data": "synthetic", "batch": 256,
                     "steps": 500, "optimizer": SGD, "cpu": {"model": {"name": "mlp", "hidden": [128, 128]}, "batch": 16}},
    "mlp1024_b64": {"model": {"name": "mlp", "hidden": [1024, 1024]}, "data": "synthetic", "batch": 64,
                    "steps": 500, "optimizer": SGD, "cpu": {"model": {"name": "mlp", "hidden": [64, 64]}, "batch": 8}},
    "resnet_small_b128": {"model": {"name": "resnet_small"}, "data": "images", "batch": 128, "steps": 200,
                          "optimizer": SGD, "cpu": {"batch": 4}},
    "char_transformer_b64": {"model": {"name": "char_transformer"}, "data": "text", "batch": 64, "steps": 200,
                             "optimizer": ADAMW, "cpu": {"batch": 4}},
}
WARMUP = {"cuda": 50, "cpu": 2}
CPU_STEPS = 4
# The PyTorch sides (bench/gpu_bench_peer.py): the eager baseline, DDP, and the strong peers a user would compare
# with: eager on a device-resident set, eager fed by a pinned DataLoader, torch.compile default and reduce-overhead.
PEERS = ("eager", "ddp", "resident", "loader", "compile", "compile_ro")
EAGER_PEERS = ("eager", "resident", "loader")  # "the best eager peer": the fastest of these
COMPILED_PEERS = ("compile", "compile_ro")
# herd >= 1.1x the best eager peer's samples/s, <= 1.05x that peer's memory; >= 1.0x compile_ro; >= 2x the best
# eager peer on the launch-bound shape.
SPEED_TARGET, MEMORY_TARGET, COMPILE_TARGET, LAUNCH_TARGET = 1.1, 1.05, 1.0, 2.0
LAUNCH_BOUND_SHAPE = "mlp1024_b64"
PARAMETERS = re.compile(r" with (\d+) parameters")
MEMORY_METRIC = "herd_train_device_memory_peak_bytes"
METRIC_LINE = re.compile(r"^" + MEMORY_METRIC + r"\{([^}]*)\}\s+(\S+)", re.M)
# The trainer's host seconds per phase (clock reads around kernel launches, not GPU time): against the run's
# wall time they say whether herd's step loop is bound by its host thread or by the GPU.
HOST_COUNTERS = ("steps", "forward_seconds", "backward_seconds", "optimizer_seconds", "compute_seconds")
COUNTER_LINE = re.compile(r"^herd_train_(" + "|".join(HOST_COUNTERS) + r")_total\{([^}]*)\}\s+(\S+)", re.M)
# Any series of the trainer's: the scrape reached the trainer's metrics even where the memory one is absent.
STEPS_LINE = re.compile(r"^herd_train_steps_total\{([^}]*)\}", re.M)
JOB_LABEL = re.compile(r'job="([^"]*)"')


def shape_for(name, device):
    shape = {k: v for k, v in SHAPES[name].items() if k != "cpu"}
    if device == "cpu":
        shape.update(SHAPES[name]["cpu"])
    return shape


class MemoryWatcher(threading.Thread):
    """Scrapes the worker's /metrics every `interval` s and keeps each job's largest
    herd_train_device_memory_peak_bytes (the trainer's series leave the page when it exits)."""

    def __init__(self, address, interval=0.2):
        super().__init__(daemon=True)
        self.url = f"http://{address}/metrics"
        self.interval = interval
        self.peaks = {}
        self.scraped = set()  # jobs whose trainer metrics a scrape saw
        self.counters = {}  # job -> {counter: largest value seen}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def scrape(self):
        try:
            with urllib.request.urlopen(self.url, timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return  # the page is back at the next scrape
        with self.lock:
            for labels in STEPS_LINE.findall(text):
                job = JOB_LABEL.search(labels)
                if job:
                    self.scraped.add(job.group(1))
            for labels, value in METRIC_LINE.findall(text):
                job = JOB_LABEL.search(labels)
                if job:
                    self.peaks[job.group(1)] = max(self.peaks.get(job.group(1), 0.0), float(value))
            for name, labels, value in COUNTER_LINE.findall(text):
                job = JOB_LABEL.search(labels)
                if job:
                    seen = self.counters.setdefault(job.group(1), {})
                    seen[name] = max(seen.get(name, 0.0), float(value))

    def run(self):
        while not self.stopping.wait(self.interval):
            self.scrape()

    def peak(self, job):
        with self.lock:
            return self.peaks.get(job)

    def host_seconds_per_step(self, job):
        """{phase: host seconds per step} over the whole job (warmup included), or None."""
        with self.lock:
            seen = dict(self.counters.get(job, {}))
        steps = seen.pop("steps", 0)
        return {k.replace("_seconds", ""): round(v / steps, 6) for k, v in seen.items()} if steps else None

    def saw(self, job):
        with self.lock:
            return job in self.scraped


class PeerProcess:
    """bench/gpu_bench_peer.py under the PyTorch interpreter: one JSON request, one JSON answer."""

    def __init__(self, python, device, threads, log_path, timeout):
        self.log_path = log_path
        self.timeout = timeout
        self.log = open(log_path, "w")
        # Not the herd bundle's environment: the peer loads its own interpreter's libraries.
        self.proc = subprocess.Popen([python, PEER, "--device", device, "--threads", str(threads)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.hello = self._read(timeout=max(timeout, 120))
        if not self.hello.get("ok"):
            raise RuntimeError(f"PyTorch peer: {self.hello.get('error')}")

    def ask(self, request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read(self.timeout)

    def _read(self, timeout):
        deadline = time.time() + timeout
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.time()))
            line = self.proc.stdout.readline() if ready else None
            if not line:
                self.proc.kill()
                with open(self.log_path) as f:
                    tail = f.read()[-3000:]
                raise RuntimeError(f"PyTorch peer {'exited' if ready else f'gave no answer in {timeout:g} s'}: {tail}")
            try:
                return json.loads(line)
            except ValueError:
                print(f"PyTorch peer, not an answer: {line.rstrip()}", file=sys.stderr)

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


def write_text(path, size):
    """A text file of `size` bytes: the repository's own sources and docs, repeated as needed."""
    chunks = []
    for top in ("README.md", "docs", "bench", "worker", "coordinator", "common", "client", "proto"):
        base = os.path.join(ROOT, top)
        paths = [base] if os.path.isfile(base) else sorted(
            os.path.join(d, f) for d, _, files in os.walk(base) for f in files)
        for p in paths:
            if p.endswith((".md", ".cc", ".h", ".py", ".proto")):
                with open(p, "rb") as f:
                    chunks.append(f.read())
    corpus = b"".join(chunks)
    with open(path, "wb") as out:
        written = 0
        while written < size:
            piece = corpus[:size - written]
            out.write(piece)
            written += len(piece)


class Bench:
    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.paths = {}  # shape name -> its image folder or text file, made once for every run of the shape

    def samples(self, shape):
        # One batch more than the run: the epoch (and its evaluation) never ends inside it.
        return (self.args.warmup + self.steps(shape) + 1) * shape["batch"]

    def steps(self, shape):
        return self.args.steps or (CPU_STEPS if self.args.device == "cpu" else shape["steps"])

    def prepare(self, peer, name, shape):
        """Returns (herd's dataset spec in YAML, the peer's data spec)."""
        n = self.samples(shape)
        if shape["data"] == "synthetic":
            return (f"{{kind: synthetic, synthetic_samples: {n}, synthetic_features: {FEATURES}, "
                    f"synthetic_classes: {CLASSES}}}",
                    {"kind": "synthetic", "samples": n, "features": FEATURES, "classes": CLASSES, "seed": 1})
        if shape["data"] == "images":
            path = os.path.join(self.workdir, f"images-{name}")
            if name not in self.paths:
                answer = peer.ask({"op": "write_images", "path": path, "train": n, "test": 256, "seed": 1})
                if not answer.get("ok"):
                    raise RuntimeError(f"writing the image set: {answer.get('error')}")
                self.paths[name] = path
            return f"{{kind: idx, path: {path}}}", {"kind": "idx", "path": path}
        path = os.path.join(self.workdir, f"text-{name}.txt")
        if name not in self.paths:
            # herd trains on the first 90% of the bytes, in windows of 64 (+1 for the last target).
            write_text(path, (n * 64 + 1) * 10 // 9 + 4096)
            self.paths[name] = path
        return f"{{kind: text, path: {path}}}", {"kind": "text", "path": path}

    def herd_spec(self, name, shape, precision, dataset):
        model = shape["model"]
        if model["name"] == "mlp":
            model_yaml = f"{{name: mlp, hidden: [{', '.join(str(h) for h in model['hidden'])}]}}"
        else:
            model_yaml = model["name"]
        opt = shape["optimizer"]
        optimizer = (f"{{name: sgd, lr: {opt['lr']}, momentum: {opt['momentum']}}}" if opt["name"] == "sgd" else
                     f"{{name: adamw, lr: {opt['lr']}, weight_decay: {opt['weight_decay']}}}")
        a = self.args
        return (f"name: gpubench-{name}-{precision}\nmodel: {model_yaml}\ndataset: {dataset}\n"
                f"batch_size: {shape['batch']}\nmax_steps: {a.warmup + self.steps(shape)}\noptimizer: {optimizer}\n"
                f"threads: {a.threads}\nlog_interval_steps: {a.warmup}\neval: {{max_samples: 256}}\n"
                f"device: {a.device}\n" + ("bf16_autocast: true\n" if precision == "bf16" else "") +
                ("cuda_graphs: true\n" if getattr(a, "cuda_graphs", False) else "") +
                "min_workers: 1\nmax_workers: 1\nseed: 1\n")

    def run_herd(self, cluster, watcher, name, shape, precision, dataset):
        job, info = cluster.run_job(self.herd_spec(name, shape, precision, dataset), timeout=self.args.run_timeout)
        trainer_log = os.path.join(cluster.dir, info["workers"][0], "jobs", job, "trainer.log")
        times = step_times(trainer_log)
        first, last = self.args.warmup, self.args.warmup + self.steps(shape)
        if first not in times or last not in times:
            raise RuntimeError(f"{trainer_log}: no log line for step {first} or {last}")
        seconds = times[last] - times[first] + (86400 if times[last] < times[first] else 0)  # past midnight
        with open(trainer_log) as f:
            m = PARAMETERS.search(f.read())
        if not m:
            raise RuntimeError(f"{trainer_log}: no 'with N parameters' line to check the PyTorch model against")
        watcher.scrape()
        return {"samples_per_s": self.steps(shape) * shape["batch"] / seconds, "seconds": seconds,
                "loss": info.get("loss"), "parameters": int(m.group(1)), "job": job,
                "peak_bytes": watcher.peak(job), "host_seconds_per_step": watcher.host_seconds_per_step(job)}

    def run_torch(self, peer, side, shape, precision, data):
        a = self.args
        answer = peer.ask({"op": "train", "side": side, "model": shape["model"], "data": data,
                           "optimizer": shape["optimizer"], "precision": precision, "batch": shape["batch"],
                           "warmup": a.warmup, "steps": self.steps(shape), "log_interval": a.warmup, "seed": 1})
        if answer.get("unavailable"):
            raise Unavailable(answer.get("error"))
        if not answer.get("ok"):
            raise RuntimeError(answer.get("error"))
        return answer


class Unavailable(Exception):
    """A side this PyTorch cannot run (torch.compile missing or failing): reported, not a failure."""


def mib(value):
    return "n/a" if value is None else f"{value / 2**20:.0f}"


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def median_of(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def summarize(cells, watcher, device):
    """Medians per side, ratios and targets; herd's peaks re-read (a trainer's last snapshot may come late)."""
    results = []
    for (name, precision), cell in cells.items():
        row = {"shape": name, "precision": precision, "batch": cell["batch"], "steps": cell["steps"],
               "optimizer": cell["optimizer"], "parameters": cell.get("parameters"), "errors": cell["errors"],
               "unavailable": dict(cell.get("unavailable", {}))}
        for side in ("herd",) + PEERS:
            runs = cell["runs"].get(side, [])
            if side == "herd":
                for r in runs:
                    r["peak_bytes"] = watcher.peak(r["job"]) if watcher else None
                # Whether /metrics showed every run's trainer: n/a memory then means the metric is absent.
                row["herd_host_seconds_per_step"] = runs[-1].get("host_seconds_per_step") if runs else None
                row["herd_metrics_scraped"] = bool(runs) and watcher is not None and all(
                    watcher.saw(r["job"]) for r in runs)
            row[f"{side}_samples_per_s_runs"] = [round(r["samples_per_s"], 1) for r in runs]
            row[f"{side}_samples_per_s"] = round(statistics.median(r["samples_per_s"] for r in runs), 1) if runs else None
            peaks = [r["peak_bytes"] for r in runs if r.get("peak_bytes") is not None]
            row[f"{side}_peak_bytes"] = max(peaks) if peaks else None
            if side in COMPILED_PEERS:
                row[f"{side}_compile_seconds"] = median_of(runs, "compile_seconds")  # apart from the timed steps
            if side != "herd":
                row[f"herd_vs_{side}"] = ratio(row["herd_samples_per_s"], row[f"{side}_samples_per_s"])
                row[f"memory_vs_{side}"] = ratio(row["herd_peak_bytes"], row[f"{side}_peak_bytes"])
        eager_sides = [p for p in EAGER_PEERS if row[f"{p}_samples_per_s"] is not None]
        best = max(eager_sides, key=lambda p: row[f"{p}_samples_per_s"]) if eager_sides else None
        row["best_eager_peer"] = best
        row["herd_vs_best_eager"] = row[f"herd_vs_{best}"] if best else None
        row["memory_vs_best_eager"] = row[f"memory_vs_{best}"] if best else None
        # The targets are about GPUs: on the CPU (small sizes, the logic only) they are not judged.
        judged = device == "cuda"

        def judge(value, ok):
            return ok(value) if judged and value is not None else None
        row["meets_speed_target"] = judge(row["herd_vs_best_eager"], lambda v: v >= SPEED_TARGET)
        row["meets_memory_target"] = judge(row["memory_vs_best_eager"], lambda v: v <= MEMORY_TARGET)
        row["meets_compile_target"] = judge(row["herd_vs_compile_ro"], lambda v: v >= COMPILE_TARGET)
        row["meets_compile_memory_target"] = judge(row["memory_vs_compile_ro"], lambda v: v <= MEMORY_TARGET)
        row["meets_launch_target"] = (judge(row["herd_vs_best_eager"], lambda v: v >= LAUNCH_TARGET)
                                      if name == LAUNCH_BOUND_SHAPE else None)
        results.append(row)
    return results


def print_table(results):
    print(f"\nsamples/s per side; x = herd's speed over it (memory: herd's peak over the best eager peer's). Targets: "
          f">= {SPEED_TARGET}x the best eager peer, <= {MEMORY_TARGET}x its memory, >= {COMPILE_TARGET}x compile_ro, "
          f">= {LAUNCH_TARGET}x the best eager peer on {LAUNCH_BOUND_SHAPE}")
    print(f"{'shape':21} {'prec':4} {'herd':>9} " + " ".join(f"{p:>10} {'x':>5}" for p in PEERS) +
          f" {'MiB herd':>8} {'best':>6} {'mem x':>6}  targets")
    for r in results:
        def fmt(v, spec):
            return format("-", ">" + spec.split(".")[0]) if v is None else format(v, spec)
        peers = " ".join("unavailable".rjust(16) if p in r["unavailable"] and r[f"{p}_samples_per_s"] is None else
                         f"{fmt(r[f'{p}_samples_per_s'], '10.0f')} {fmt(r[f'herd_vs_{p}'], '5.2f')}" for p in PEERS)
        best = r["best_eager_peer"]
        targets = " ".join(f"{what} {'met' if ok else 'MISSED'}" if ok is not None else f"{what} n/a"
                           for what, ok in (("speed", r["meets_speed_target"]), ("memory", r["meets_memory_target"]),
                                            ("compile", r["meets_compile_target"]),
                                            ("launch", r["meets_launch_target"])))
        compile_s = ", ".join(f"{p} compiled in {r[p + '_compile_seconds']:.1f} s" for p in COMPILED_PEERS
                              if r.get(p + "_compile_seconds") is not None)
        print(f"{r['shape']:21} {r['precision']:4} {fmt(r['herd_samples_per_s'], '9.0f')} {peers} "
              f"{mib(r['herd_peak_bytes']):>8} {mib(r[f'{best}_peak_bytes']) if best else 'n/a':>6} "
              f"{fmt(r['memory_vs_best_eager'], '6.2f')}  {targets}"
              f"{'  ' + compile_s if compile_s else ''}{'  errors: ' + str(len(r['errors'])) if r['errors'] else ''}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "bazel-bin"),
                   help="herd's binaries in bazel-bin's layout (coordinator/herd-coordinator, ...)")
    p.add_argument("--lib-dir", help="shared libraries for herd's processes only (LD_LIBRARY_PATH), e.g. BUNDLE/lib")
    p.add_argument("--python", help="the interpreter with PyTorch (default: /opt/torch/.venv/bin/python3 on cuda, "
                                    "/usr/bin/python3 on cpu)")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--precisions", help="fp32,bf16 (default: both on cuda; fp32 on cpu, where herd has no autocast)")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--cuda-graphs", action="store_true",
                   help="herd's spec sets cuda_graphs: true (docs/gpu.md; the trainer logs why a step runs eagerly)")
    p.add_argument("--peers", default=",".join(PEERS), help="the PyTorch sides to run, of " + ", ".join(PEERS))
    p.add_argument("--warmup", type=int, help=f"untimed steps, also herd's log interval (default {WARMUP})")
    p.add_argument("--steps", type=int, help="timed steps for every shape (default: per shape on cuda, "
                                             f"{CPU_STEPS} on cpu); a multiple of --warmup")
    p.add_argument("--threads", type=int, help="intra-op threads on both sides (default: 8 on cuda, 1 on cpu)")
    p.add_argument("--budget-s", type=float, default=0,
                   help="repetitions after the first skip a cell that would end past this many seconds (0: no limit)")
    p.add_argument("--run-timeout", type=float, default=600, help="seconds one run may take")
    p.add_argument("--json-out", help="also write the results here, rewritten after every run")
    a = p.parse_args()
    a.python = a.python or PYTHON[a.device]
    a.precisions = (a.precisions or ("fp32,bf16" if a.device == "cuda" else "fp32")).split(",")
    for prec in a.precisions:
        if prec not in ("fp32", "bf16"):
            p.error(f"--precisions: unknown {prec!r} (known: fp32, bf16)")
        if prec == "bf16" and a.device == "cpu":
            p.error("--precisions bf16: herd's bf16_autocast is cuda only; use --device cuda")
    a.peers = a.peers.split(",")
    for side in a.peers:
        if side not in PEERS:
            p.error(f"--peers: unknown {side!r} (known: {', '.join(PEERS)})")
    a.shapes = a.shapes.split(",")
    for s in a.shapes:
        if s not in SHAPES:
            p.error(f"--shapes: unknown {s!r} (known: {', '.join(SHAPES)})")
    a.warmup = a.warmup or WARMUP[a.device]
    a.threads = a.threads or (min(8, os.cpu_count() or 1) if a.device == "cuda" else 1)
    if a.warmup < 1:
        p.error(f"--warmup: at least 1, got {a.warmup}")
    if a.steps is not None and (a.steps < a.warmup or a.steps % a.warmup):
        p.error(f"--steps {a.steps}: must be a positive multiple of --warmup {a.warmup} (herd logs every --warmup steps)")
    if a.reps < 1:
        p.error(f"--reps: at least 1, got {a.reps}")
    for binary in ("coordinator/herd-coordinator", "worker/daemon/herd-worker", "worker/train/herd-trainer",
                   "client/herd"):
        if not os.access(os.path.join(a.bin_dir, binary), os.X_OK):
            p.error(f"--bin-dir {a.bin_dir}: no executable {binary} (build it, or point at a bundle's bin/)")
    if not os.access(a.python, os.X_OK):
        p.error(f"--python {a.python}: not an executable")
    return a


class Interrupted(BaseException):  # not an Exception: the per-run error handlers must let it through
    pass


def interrupt(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
    raise Interrupted()


def main():
    # A SIGTERM (a timeout) still stops the cluster, whose daemons run in their own sessions, and the
    # peer, and reports the runs so far.
    signal.signal(signal.SIGTERM, interrupt)
    args = parse_args()
    started = time.time()
    workdir = tempfile.mkdtemp(prefix="herd-gpu-bench-")
    env = env_with_libs(args.lib_dir)
    bench = Bench(args, workdir)
    peer = PeerProcess(args.python, args.device, args.threads, os.path.join(workdir, "peer.log"), args.run_timeout)
    cluster = watcher = None
    cells = {}
    failed = interrupted = False
    header = {"bench": "gpu", "device": args.device, "device_name": peer.hello["device_name"],
              "torch": peer.hello["torch"], "threads": args.threads, "warmup": args.warmup, "reps": args.reps}

    def report(final):
        results = summarize(cells, watcher, args.device)
        out = dict(header, seconds=round(time.time() - started, 1), complete=final, results=results)
        if args.json_out:
            tmp = args.json_out + ".tmp"
            with open(tmp, "w") as f:
                json.dump(out, f, indent=1)
            os.replace(tmp, args.json_out)
        return out

    try:
        cluster = LocalCluster(os.path.realpath(args.bin_dir), 1, env=env, worker_args=lambda i: [
            f"--device={args.device}", "--metrics-listen=127.0.0.1:0"])
        with open(os.path.join(cluster.dir, "worker-0.json")) as f:
            watcher = MemoryWatcher(json.load(f)["metrics"])
        watcher.start()
        print(f"# {datetime.datetime.now().isoformat(timespec='seconds')} {args.device} "
              f"({peer.hello['device_name']}), torch {peer.hello['torch']}, {args.threads} threads per side, "
              f"{args.warmup} warmup steps, {args.reps} reps, logs in {cluster.dir} and {workdir}", flush=True)
        deadline = started + args.budget_s if args.budget_s > 0 else None
        first_cost = {}  # (shape, precision) -> seconds its first repetition took
        for rep in range(args.reps):
            for name in args.shapes:
                shape = shape_for(name, args.device)
                for precision in args.precisions:
                    key = (name, precision)
                    if deadline and rep > 0 and time.time() + first_cost.get(key, 0) > deadline:
                        print(f"rep {rep} {name} {precision}: skipped (--budget-s {args.budget_s:g})", flush=True)
                        continue
                    cell_start = time.time()
                    cell = cells.setdefault(key, {
                        "batch": shape["batch"], "steps": bench.steps(shape), "optimizer": shape["optimizer"]["name"],
                        "runs": {side: [] for side in ("herd",) + PEERS}, "errors": [], "unavailable": {}})
                    try:
                        dataset, data = bench.prepare(peer, name, shape)
                    except Exception as e:  # noqa: BLE001 - reported, the other shapes still run
                        cell["errors"].append(f"data: {e}")
                        print(f"rep {rep} {name} {precision}: data FAILED: {e}", flush=True)
                        failed = True
                        continue
                    # Alternate the order so neither side always runs first.
                    sides = ["herd"] + args.peers
                    if rep % 2:
                        sides.reverse()
                    for side in sides:
                        try:
                            r = (bench.run_herd(cluster, watcher, name, shape, precision, dataset) if side == "herd"
                                 else bench.run_torch(peer, side, shape, precision, data))
                        except Unavailable as e:
                            cell["unavailable"][side] = str(e)
                            print(f"rep {rep} {name:21} {precision} {side:5} unavailable: {e}", flush=True)
                            continue
                        except Exception as e:  # noqa: BLE001 - reported, the other runs still run
                            cell["errors"].append(f"rep {rep} {side}: {e}")
                            print(f"rep {rep} {name:21} {precision} {side:5} FAILED: {e}", flush=True)
                            failed = True
                            continue
                        known = cell.get("parameters")
                        if r.get("parameters") is not None:
                            if known is not None and r["parameters"] != known:
                                cell["errors"].append(f"rep {rep} {side}: {r['parameters']} parameters, "
                                                      f"the other side's model has {known}")
                                print(f"rep {rep} {name} {side}: model MISMATCH: {r['parameters']} parameters, "
                                      f"not {known}", flush=True)
                                failed = True
                                continue
                            cell["parameters"] = r["parameters"]
                        cell["runs"][side].append(r)
                        compiled = (f"  compiled in {r['compile_seconds']:.2f} s" if r.get("compile_seconds")
                                    is not None else "")
                        print(f"rep {rep} {name:21} {precision} {side:5} {r['samples_per_s']:10.1f} samples/s  "
                              f"peak {mib(r.get('peak_bytes'))} MiB  loss {r.get('loss') or 0:.4f}{compiled}", flush=True)
                        report(False)
                    first_cost.setdefault(key, time.time() - cell_start)
    except Interrupted:
        print("interrupted (SIGTERM): the runs so far", flush=True)
        interrupted = True
    finally:
        if watcher:
            watcher.scrape()  # a trainer's last snapshot, while the worker still serves it
            watcher.stopping.set()
        peer.stop()
        if cluster:
            cluster.stop()
    out = report(not interrupted)
    print_table(out["results"])
    print(json.dumps(out))
    return 143 if interrupted else 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
