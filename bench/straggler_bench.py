#!/usr/bin/env python3
"""herd and PyTorch DDP with one slow worker, in one run (issue 31).

W workers (default 3), one of them slowed to about --fraction of its speed by
duty-cycling its process with SIGSTOP/SIGCONT from this script
(bench/duty_cycle.py; no cgroups, no knob in the product). Same model,
per-worker batch, optimizer, one intra-op thread per worker, data and timing
as bench/compare_ddp.py, whose helpers run each side: herd on a real local
coordinator + W worker daemons (the slowed process is worker-(W-1)'s trainer,
found with pgrep by its coordinator, job and worker id), DDP with the
compare_ddp peer (the slowed process is one rank, found as a child of the
peer's launcher). samples/s is wall time over the timed steps only (herd:
rank 0's commit-point log lines; DDP: between barriers).

Figures, each measured in this run, for each side:
- solo: one worker alone, unslowed (fast) and slowed (slow);
- sum of solo rates: (W-1) x fast + slow, what W such workers could do if
  none waited for another;
- slowed W: W workers, one slowed.
Ratios: slowed W / sum of solo (issue 31's target for herd: >= 0.9), and
slowed W / (W x slow solo) (lock-step with equal shares: about 1).
herd runs with sync.shares --shares (default throughput: each worker's share
of the global batch follows its measured rate); DDP always has equal shares.

Prints one line per run, a summary and a final JSON line (medians of --reps).

Usage: bench/straggler_bench.py [--steps 100] [--warmup 10] [--fraction 0.5] [--reps 1]
                                [--model mlp] [--shares throughput|equal] [--bin-dir bazel-bin]
"""
import argparse
import datetime
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_ddp import (DDP_MODEL, SIZED_MLP, LocalCluster, build, ddp_command, make_torchscript,  # noqa: E402
                         run_ddp, run_herd, step_times)
from duty_cycle import DutyCycle  # noqa: E402
from recovery_bench import pids_of  # noqa: E402


def in_background(fn, *args):
    """Runs fn(*args) in a thread; returns (thread, box): box gets "result" or "error"."""
    box = {}

    def target():
        try:
            box["result"] = fn(*args)
        except BaseException as e:  # noqa: B036 - handed to the caller
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def result_of(thread, box):
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def trainer_jobs(cluster, worker):
    """{pid: job id} of the trainers of this cluster whose worker id matches the regex `worker`."""
    jobs = {}
    for pid in pids_of(f"herd-trainer --coordinator={cluster.address} --job=job-[0-9a-f]+ "
                       f"--worker-id={worker}( |$)"):
        for arg in cmdline(pid):
            if arg.startswith(b"--job="):
                jobs[pid] = arg[len(b"--job="):].decode()
    return jobs


def wait_for(find, thread, what, timeout=120):
    """Polls find() until it returns something; fails if `thread` (the run) ends first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = find()
        if found:
            return found
        if not thread.is_alive():
            raise RuntimeError(f"the run ended before {what} appeared")
        time.sleep(0.01)
    raise RuntimeError(f"no {what} within {timeout} s")


def seconds_of_day(unix):
    t = time.localtime(unix)
    return t.tm_hour * 3600 + t.tm_min * 60 + t.tm_sec + unix % 1


def herd_run(cluster, world, args, slow_worker=None):
    """samples/s of one herd job on `world` workers; `slow_worker` (a worker-id regex) names whose trainer
    to slow. Returns (samples/s, the DutyCycle or None)."""
    old = set(trainer_jobs(cluster, "worker-[0-9]+").values())  # trainers of earlier jobs may still be exiting
    thread, box = in_background(run_herd, cluster, args.model, world, args)
    cycle = job = None
    try:
        if slow_worker is not None:
            def find():
                new = {pid: j for pid, j in trainer_jobs(cluster, slow_worker).items() if j not in old}
                return next(iter(new.items()), None)
            pid, job = wait_for(find, thread, f"a trainer on {slow_worker}")
            cycle = DutyCycle(pid, args.fraction, args.period).start()
        sps, _ = result_of(thread, box)
    finally:
        if cycle:
            cycle.stop()
    if cycle:
        # The slowdown must cover the timed steps: it began before rank 0 logged the first of them.
        for log in glob.glob(os.path.join(cluster.dir, "worker-*", "jobs", job, "trainer.log")):
            times = step_times(log)
            if args.warmup in times:
                lead = (times[args.warmup] - seconds_of_day(cycle.started_at)) % 86400
                if lead > 43200:
                    raise RuntimeError(f"herd: the slowdown began {86400 - lead:.2f} s after the timed steps")
    return sps, cycle


def children(parent, pattern):
    out = subprocess.run(["pgrep", "-P", str(parent), "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def start_time(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime


def ddp_run(world, args, slow=False):
    """samples/s of one DDP run on `world` ranks; with `slow`, the last rank started is slowed."""
    thread, box = in_background(run_ddp, args.model, world, args)
    cycle = None
    script = os.path.basename(ddp_command(args.model, args.torchscript)[0])
    try:
        if slow:
            launcher = wait_for(lambda: children(os.getpid(), script), thread, "the DDP launcher")[0]

            def ranks():
                pids = children(launcher, "spawn_main")
                return pids if len(pids) == world else None
            pid = max(wait_for(ranks, thread, f"{world} DDP ranks"), key=start_time)
            cycle = DutyCycle(pid, args.fraction, args.period).start()
        sps, _ = result_of(thread, box)
        finished = time.time()
    finally:
        if cycle:
            cycle.stop()
    if cycle:
        timed = args.steps * args.batch * world / sps  # the timed window's length
        if cycle.started_at > finished - timed:
            raise RuntimeError("DDP: the slowdown began after the timed steps")
    return sps, cycle


def describe(cycle):
    return f"  (stopped {100 * cycle.stopped_fraction():.0f}% of {cycle.cycles} cycles)" if cycle else ""


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still stops the cluster
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="timed steps (a multiple of --warmup)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=64, help="per worker")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--fraction", type=float, default=0.5, help="the slowed worker's running fraction")
    p.add_argument("--period", type=float, default=0.04, help="duty cycle period, seconds")
    p.add_argument("--model", default="mlp", help="a bench/compare_ddp.py model")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--shares", choices=["throughput", "equal"], default="throughput",
                   help="herd's sync.shares (DDP's shares are always equal)")
    p.add_argument("--bin-dir", help="use binaries already built there instead of building (bazel-bin)")
    args = p.parse_args()
    if args.steps % args.warmup:
        p.error("--steps must be a multiple of --warmup (herd logs every --warmup steps)")
    if not 0 < args.fraction < 1:
        p.error("--fraction must be in (0, 1)")
    if args.world < 2:
        p.error("--world must be at least 2")
    if args.model not in DDP_MODEL and args.model not in SIZED_MLP and args.model != "torchscript":
        p.error(f"--model: unknown {args.model!r} (known: {', '.join([*DDP_MODEL, *SIZED_MLP, 'torchscript'])})")
    args.herd_spec_extra = f"sync: {{shares: {args.shares}}}\n"
    bin_dir = args.bin_dir or build()
    args.torchscript = make_torchscript(tempfile.mkdtemp(prefix="herd-bench-ts-")) \
        if args.model == "torchscript" else None
    W = args.world
    began = time.time()
    print(f"# {datetime.datetime.now().isoformat(timespec='seconds')} {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}, {args.model}, batch {args.batch}/worker, {args.warmup} warmup + {args.steps} "
          f"timed steps, W={W}, one worker duty-cycled at {args.fraction} of {1000 * args.period:.0f} ms, "
          f"{args.reps} reps, herd sync.shares {args.shares}", flush=True)
    runs = {}  # (side, case) -> [samples/s]

    def record(side, case, sps, cycle):
        runs.setdefault((side, case), []).append(sps)
        print(f"rep {rep} {side:4s} {case:9s} {sps:9.1f} samples/s{describe(cycle)}", flush=True)

    cluster = LocalCluster(bin_dir, W)
    try:
        for rep in range(args.reps):
            for side in (["herd", "ddp"] if rep % 2 == 0 else ["ddp", "herd"]):  # neither side always first
                if side == "herd":
                    record(side, "solo", *herd_run(cluster, 1, args))
                    record(side, "solo slow", *herd_run(cluster, 1, args, slow_worker="worker-[0-9]+"))
                    record(side, f"W={W} slow", *herd_run(cluster, W, args, slow_worker=f"worker-{W - 1}"))
                else:
                    record(side, "solo", *ddp_run(1, args))
                    record(side, "solo slow", *ddp_run(1, args, slow=True))
                    record(side, f"W={W} slow", *ddp_run(W, args, slow=True))
    finally:
        cluster.stop()

    summary = {}
    print(f"\n{'side':4s} {'solo':>9s} {'solo slow':>9s} {'sum solo':>9s} {f'W={W} slow':>9s} "
          f"{'/sum solo':>9s} {'/W x slow':>9s}")
    for side in ("herd", "ddp"):
        fast = statistics.median(runs[(side, "solo")])
        slow = statistics.median(runs[(side, "solo slow")])
        together = statistics.median(runs[(side, f"W={W} slow")])
        total = (W - 1) * fast + slow
        summary[side] = {"solo_samples_per_s": round(fast, 1), "solo_slow_samples_per_s": round(slow, 1),
                         "sum_of_solo_samples_per_s": round(total, 1),
                         "slowed_world_samples_per_s": round(together, 1),
                         "ratio_to_sum_of_solo": round(together / total, 3),
                         "ratio_to_world_x_slowest": round(together / (W * slow), 3)}
        print(f"{side:4s} {fast:9.1f} {slow:9.1f} {total:9.1f} {together:9.1f} {together / total:9.3f} "
              f"{together / (W * slow):9.3f}")
    herd_ratio = summary["herd"]["ratio_to_sum_of_solo"]
    print(f"herd/sum of solo {herd_ratio:.3f} (target >= 0.9: {'met' if herd_ratio >= 0.9 else 'missed'}); "
          f"DDP/sum of solo {summary['ddp']['ratio_to_sum_of_solo']:.3f}; "
          f"slow solo / solo: herd {summary['herd']['solo_slow_samples_per_s'] / summary['herd']['solo_samples_per_s']:.2f}"
          f", DDP {summary['ddp']['solo_slow_samples_per_s'] / summary['ddp']['solo_samples_per_s']:.2f}; "
          f"{time.time() - began:.0f} s, load {os.getloadavg()[0]:.1f}")
    print(json.dumps({"benchmark": "straggler", "model": args.model, "batch": args.batch, "steps": args.steps,
                      "warmup": args.warmup, "world": W, "fraction": args.fraction, "shares": args.shares, "period_s": args.period,
                      "reps": args.reps, "cores": os.cpu_count(), "herd_target_met": herd_ratio >= 0.9,
                      "results": summary, "runs": {f"{s} {c}": v for (s, c), v in runs.items()}}))


if __name__ == "__main__":
    main()
