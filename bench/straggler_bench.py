#!/usr/bin/env python3
"""herd and PyTorch DDP with one slow worker, in one run.

W workers (default 3), one of them slowed to about --fraction of the others'
speed by duty-cycling its process with SIGSTOP/SIGCONT from this script
(bench/herdbench/duty_cycle.py; no cgroups, no knob in the product). On a
machine with fewer than W + 1 cores every worker is duty-cycled, the others at
--fast-fraction and the slow one at --fast-fraction x --fraction, so that
together they need at most about cores - 0.5 cores: the machine acts as W
slower cores instead of W processes fighting over too few (see bench/README).
A fraction is a CPU-time quota per --period by default (--budget cpu, what
cgroup cpu.max enforces), so a worker that another kept off a shared core
catches up later in the period; --budget deadline has the kernel hold each
process's main thread to the same share (SCHED_DEADLINE: no signals, no
controlling thread; needs root); --budget wall limits the running window's
wall time instead.
Same model, per-worker batch, optimizer, one intra-op thread per worker, data
and timing as bench/compare_ddp.py, whose helpers (bench/herdbench/herd_vs_ddp.py)
run each side: herd on a real local coordinator + W worker daemons (worker-i's
trainer found with pgrep by its coordinator, job and worker id; the slow one is
worker-(W-1)'s), DDP with the DDP peer, bench/ddp_peer.py (its ranks are the
launcher's children, in start order; the slow one is the last). samples/s is wall time over the timed steps only (herd:
rank 0's commit-point log lines; DDP: between barriers).

Figures, each measured in this run, for each side:
- solo: one worker alone at the fast fraction (fast) and at the slow one (slow),
  run both before and after the W run of the same rep and averaged (unless
  --no-bracket): this machine's speed drifts by tens of percent over minutes,
  and bracketing cancels a steady drift;
- sum of solo rates: (W-1) x fast + slow, what W such workers could do if
  none waited for another;
- slowed W: W workers, one slowed.
Ratios: slowed W / sum of solo (the target for herd: >= 0.9), and
slowed W / (W x slow solo) (lock-step with equal shares: about 1).
herd runs with sync.shares --shares (default throughput: each worker's share
of the global batch follows its measured rate); DDP always has equal shares.

Prints one line per run, a summary and a final JSON line (medians of --reps).

Usage: bench/straggler_bench.py [--steps 100] [--warmup 10] [--batch 1024] [--fraction 0.5]
                                [--fast-fraction auto] [--period 0.01] [--budget cpu|deadline|wall] [--reps 1] [--no-bracket]
                                [--model mlp] [--shares throughput|equal] [--sides herd,ddp]
                                [--bin-dir bazel-bin] [--lib-dir BUNDLE/lib] [--python /usr/bin/python3] [--verbose]
"""
import argparse
import datetime
import glob
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from herdbench.cluster import LocalCluster, build, env_with_libs, pids_of, share_trainers_openblas_kernels
from herdbench.duty_cycle import BUDGETS, DutyCycle
from herdbench.herd_vs_ddp import DDP_PYTHON, ddp_command, make_torchscript, run_ddp_result, run_herd, unknown_model
from herdbench.trainer_logs import step_times


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


def cycle_all(pids_by_rank, fractions, args):
    """One DutyCycle per process, each at its fraction; a fraction of 1 runs it unslowed (no signals)."""
    return [DutyCycle(pid, fractions[i], args.period, args.budget).start() for i, pid in enumerate(pids_by_rank)]


def stop_all(cycles):
    for cycle in cycles:
        cycle.stop()


REPLAN = re.compile(r"step (\d+): batch shares re-planned .* -> \[([0-9, ]+)\]")
# Rank 0's line at each commit point (straggler.h, DescribeStepTimes).
SPLIT = re.compile(r"step (\d+): compute/wait per step and samples per step of each rank since the last commit: (.*)")
RANK_SPLIT = re.compile(r"rank (\d+) ([0-9.]+)/([0-9.]+) s")


def rank0_lines(cluster, job, world):
    """The lines of all trainers' logs of `job`: the ones matched here only rank 0 writes, and which worker
    holds rank 0 is the coordinator's choice."""
    for i in range(world):
        with open(os.path.join(cluster.dir, f"worker-{i}", "jobs", job, "trainer.log")) as f:
            yield from f


def herd_notes(cluster, job, world, warmup, verbose=False):
    """From rank 0's log: each re-plan of the shares, and each rank's share of the timed steps (the
    intervals after the warmup's) spent waiting for the all-reduce: where a W-worker run loses time
    against the sum of solo rates. (The trainers' own final wait figures include the warmup's steps,
    which run on equal shares, so they overstate what the timed steps waited.)"""
    if world < 2:
        return ""
    replans = []
    compute, wait = [0.0] * world, [0.0] * world
    for line in rank0_lines(cluster, job, world):
        if m := REPLAN.search(line):
            replans.append(f"step {m.group(1)} [{m.group(2)}]")
        if verbose and (SPLIT.search(line) or REPLAN.search(line)):
            print("    rank 0:", line.strip(), flush=True)
        if (m := SPLIT.search(line)) and int(m.group(1)) > warmup:
            for rank, c, w in RANK_SPLIT.findall(m.group(2)):
                compute[int(rank)] += float(c)
                wait[int(rank)] += float(w)
    waits = "/".join(f"{100 * w / (c + w):.0f}%" if c + w > 0 else "-" for c, w in zip(compute, wait))
    return f"  shares {' '.join(replans) or 'never re-planned'}; timed steps' all-reduce wait {waits}"


def herd_run(cluster, world, args, fractions):
    """samples/s of one herd job on `world` workers, worker-i's trainer duty-cycled at fractions[i].
    Returns (samples/s, [DutyCycle], notes, [wall clock at the start and the end of the timed steps])."""
    old = set(trainer_jobs(cluster, "worker-[0-9]+").values())  # trainers of earlier jobs may still be exiting
    thread, box = in_background(run_herd, cluster, args.model, world, args)
    cycles = []
    job = None
    try:
        def find():
            new = {pid: j for pid, j in trainer_jobs(cluster, "worker-[0-9]+").items() if j not in old}
            return new if len(new) == world else None
        found = wait_for(find, thread, f"{world} trainers")
        job = next(iter(found.values()))
        by_worker = {}
        for i in range(world):
            by_worker[i] = next(pid for pid in trainer_jobs(cluster, f"worker-{i}") if pid in found)
        cycles = cycle_all([by_worker[i] for i in range(world)], fractions, args)
        sps, _ = result_of(thread, box)
    finally:
        stop_all(cycles)
    # The slowdown must cover the timed steps: it began before rank 0 logged the first of them.
    began = max(c.started_at for c in cycles)
    timed = None
    for log in glob.glob(os.path.join(cluster.dir, "worker-*", "jobs", job, "trainer.log")):
        times = step_times(log)
        if args.warmup in times:
            lead = (times[args.warmup] - seconds_of_day(began)) % 86400
            if lead > 43200:
                raise RuntimeError(f"herd: the slowdown began {86400 - lead:.2f} s after the timed steps")
            # Rank 0's log times (seconds of day) as wall clock, counted from when the slowdown began.
            timed = [began + (times[step] - seconds_of_day(began)) % 86400
                     for step in (args.warmup, args.warmup + args.steps)]
    return sps, cycles, herd_notes(cluster, job, world, args.warmup, args.verbose), timed


def children(parent, pattern):
    out = subprocess.run(["pgrep", "-P", str(parent), "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def start_time(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime


def ddp_run(world, args, fractions):
    """samples/s of one DDP run on `world` ranks, the i-th rank started duty-cycled at fractions[i]
    (so the last one started gets the last fraction). Returns (samples/s, [DutyCycle], "", [wall clock at the
    start and the end of the timed steps])."""
    thread, box = in_background(run_ddp_result, args.model, world, args)
    cycles = []
    script = os.path.basename(ddp_command(args.model, args.torchscript)[0])
    try:
        launcher = wait_for(lambda: children(os.getpid(), script), thread, "the DDP launcher")[0]

        def ranks():
            pids = children(launcher, "spawn_main")
            return pids if len(pids) == world else None
        cycles = cycle_all(sorted(wait_for(ranks, thread, f"{world} DDP ranks"), key=start_time), fractions, args)
        result = result_of(thread, box)
    finally:
        stop_all(cycles)
    timed = result["timed_unix"]  # rank 0's wall clock at the start and the end of the timed steps
    if max(c.started_at for c in cycles) > timed[0]:
        raise RuntimeError("DDP: the slowdown began after the timed steps")
    return result["samples_per_s"], cycles, "", timed


def describe(cycles, timed):
    """What the duty cycles really achieved, for each process: over the timed steps, its CPU time per wall
    second (cores' worth) and the share of wall time its main thread waited for a core while it could run
    (a worker with a core of its own never waits; not shown with the deadline budget, where it includes the
    time the kernel holds the thread); over the whole cycled time (warmup included), its running share
    (1 - stopped share) and stops (none with the deadline budget)."""
    def one(c):
        got = c.window(*timed) if timed else None
        queued = f" queued {got[1]:.2f}" if got and c.budget != "deadline" else ""
        text = f"cpu {got[0]:.2f}{queued}" if got else "cpu ?"
        return text + (f" ran {1 - c.stopped_fraction():.2f} of {c.cycles}" if c.cycles else "")
    return "  (" + ", ".join(one(c) for c in cycles) + ")"


def rep_solo_rates(runs, side, case, bracket):
    """Each rep's solo rate for `case`: with --bracket, the mean of the runs just before and just after that
    rep's W run, so that a drift of the machine's speed over the rep cancels to first order."""
    before = runs[(side, case)]
    if not bracket:
        return before
    return [(b + a) / 2 for b, a in zip(before, runs[(side, f"{case} after")])]


def default_fast_fraction(cores, world, slow_ratio):
    """The unslowed workers' running fraction: 1 with a spare core (cores >= W + 1), else the largest f with
    (W - 1) f + slow_ratio f <= cores - 0.5, so W throttled workers fit in the cores with headroom for the
    coordinator, the daemons and this script."""
    if cores >= world + 1:
        return 1.0
    return min(1.0, (cores - 0.5) / (world - 1 + slow_ratio))


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still stops the cluster
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100, help="timed steps (a multiple of --warmup)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=1024,
                   help="per worker: large enough that a step spans several duty-cycle periods")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--fraction", type=float, default=0.5,
                   help="the slowed worker's speed relative to the others (its running fraction is this x "
                        "--fast-fraction)")
    p.add_argument("--fast-fraction", type=float,
                   help="the other workers' running fraction (default: 1 with at least W + 1 cores, else "
                        "(cores - 0.5) / (W - 1 + --fraction))")
    p.add_argument("--period", type=float, default=0.01, help="duty cycle period, seconds")
    p.add_argument("--budget", choices=BUDGETS, default="cpu",
                   help="what a worker's fraction limits (bench/herdbench/duty_cycle.py): cpu, its CPU time in each period "
                        "(cgroup cpu.max's quota; workers kept off a shared core catch up while one is free), "
                        "deadline, the same share of its main thread held by the kernel (SCHED_DEADLINE, root), "
                        "or wall, its running window's wall time")
    p.add_argument("--model", default="mlp", help="a bench/compare_ddp.py model")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--shares", choices=["throughput", "equal"], default="throughput",
                   help="herd's sync.shares (DDP's shares are always equal)")
    p.add_argument("--sides", default="herd,ddp", help="which sides to run (the summary needs both)")
    p.add_argument("--no-bracket", dest="bracket", action="store_false",
                   help="run each side's solo runs only before its W run, not also after it (each rep's ratio "
                        "then compares the W run with solo runs that all came before it)")
    p.add_argument("--bin-dir", help="use binaries already built there instead of building (bazel-bin)")
    p.add_argument("--verbose", action="store_true",
                   help="print rank 0's per-commit split of each rank's step time and its re-plans (herd W runs)")
    p.add_argument("--lib-dir", help="shared libraries for herd's processes only (LD_LIBRARY_PATH), e.g. a "
                                     "GPU bundle's lib/ (scripts/gpu_bundle.sh)")
    p.add_argument("--python", default=DDP_PYTHON,
                   help="the Python with torch that runs the DDP side")
    args = p.parse_args()
    if args.steps % args.warmup:
        p.error("--steps must be a multiple of --warmup (herd logs every --warmup steps)")
    if not 0 < args.fraction < 1:
        p.error("--fraction must be in (0, 1)")
    if args.fast_fraction is None:
        args.fast_fraction = default_fast_fraction(os.cpu_count(), args.world, args.fraction)
    if not 0 < args.fast_fraction <= 1:
        p.error(f"--fast-fraction must be in (0, 1], got {args.fast_fraction}")
    if args.world < 2:
        p.error("--world must be at least 2")
    if unknown_model(args.model):
        p.error(f"--model: {unknown_model(args.model)}")
    args.herd_spec_extra = f"sync: {{shares: {args.shares}}}\n"
    bin_dir = args.bin_dir or build()
    openblas = share_trainers_openblas_kernels(bin_dir, args.lib_dir)
    env = env_with_libs(args.lib_dir)
    args.torchscript = make_torchscript(tempfile.mkdtemp(prefix="herd-bench-ts-")) \
        if args.model == "torchscript" else None
    W = args.world
    fast, slow = args.fast_fraction, args.fast_fraction * args.fraction
    began = time.time()
    print(f"# {datetime.datetime.now().isoformat(timespec='seconds')} {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}, {args.model}, batch {args.batch}/worker, {args.warmup} warmup + {args.steps} "
          f"timed steps, W={W}, workers run {fast:.3f} and the slow one {slow:.3f} of every "
          f"{1000 * args.period:.0f} ms ({args.budget} budget; demand {(W - 1) * fast + slow:.2f} cores), "
          f"{args.reps} reps, herd sync.shares {args.shares}, OpenBLAS kernels {openblas or 'n/a'} (both sides)",
          flush=True)
    runs = {}  # (side, case) -> [samples/s]

    def record(side, case, sps, cycles, notes, timed):
        runs.setdefault((side, case), []).append(sps)
        print(f"rep {rep} {side:4s} {case:15s} {sps:9.1f} samples/s{describe(cycles, timed)}  load "
              f"{os.getloadavg()[0]:.2f}{notes}", flush=True)

    cluster = LocalCluster(bin_dir, W, env=env)
    try:
        for rep in range(args.reps):
            order = ["herd", "ddp"] if rep % 2 == 0 else ["ddp", "herd"]  # neither side always first
            for side in [s for s in order if s in args.sides.split(",")]:
                run = (lambda world, fr: herd_run(cluster, world, args, fr)) if side == "herd" else \
                    (lambda world, fr: ddp_run(world, args, fr))
                record(side, "solo", *run(1, [fast]))
                record(side, "solo slow", *run(1, [slow]))
                record(side, f"W={W} slow", *run(W, [fast] * (W - 1) + [slow]))
                if args.bracket:  # the same solo runs again, in reverse order: linear drift cancels
                    record(side, "solo slow after", *run(1, [slow]))
                    record(side, "solo after", *run(1, [fast]))
    finally:
        cluster.stop()

    if set(args.sides.split(",")) != {"herd", "ddp"}:
        return
    summary = {}
    print(f"\n{'side':4s} {'solo':>9s} {'solo slow':>9s} {'sum solo':>9s} {f'W={W} slow':>9s} "
          f"{'/sum solo':>9s} {'/W x slow':>9s}")
    for side in ("herd", "ddp"):
        solos = rep_solo_rates(runs, side, "solo", args.bracket)
        solo_slows = rep_solo_rates(runs, side, "solo slow", args.bracket)
        solo = statistics.median(solos)
        solo_slow = statistics.median(solo_slows)
        together = statistics.median(runs[(side, f"W={W} slow")])
        total = (W - 1) * solo + solo_slow
        summary[side] = {"solo_samples_per_s": round(solo, 1), "solo_slow_samples_per_s": round(solo_slow, 1),
                         "sum_of_solo_samples_per_s": round(total, 1),
                         "slowed_world_samples_per_s": round(together, 1),
                         "ratio_to_sum_of_solo": round(together / total, 3),
                         "ratio_to_world_x_slowest": round(together / (W * solo_slow), 3),
                         # Each rep's W run against that rep's own solo runs: the machine's speed can drift
                         # between reps, which the medians above mix.
                         "ratio_to_sum_of_solo_by_rep": [
                             round(w / ((W - 1) * s1 + s2), 3) for s1, s2, w in
                             zip(solos, solo_slows, runs[(side, f"W={W} slow")])]}
        print(f"{side:4s} {solo:9.1f} {solo_slow:9.1f} {total:9.1f} {together:9.1f} {together / total:9.3f} "
              f"{together / (W * solo_slow):9.3f}")
    herd_ratio = summary["herd"]["ratio_to_sum_of_solo"]
    print(f"herd/sum of solo {herd_ratio:.3f} (target >= 0.9: {'met' if herd_ratio >= 0.9 else 'missed'}); "
          f"DDP/sum of solo {summary['ddp']['ratio_to_sum_of_solo']:.3f}; "
          f"slow solo / solo: herd {summary['herd']['solo_slow_samples_per_s'] / summary['herd']['solo_samples_per_s']:.2f}"
          f", DDP {summary['ddp']['solo_slow_samples_per_s'] / summary['ddp']['solo_samples_per_s']:.2f}; "
          f"each rep against its own solo runs: herd {', '.join(map(str, summary['herd']['ratio_to_sum_of_solo_by_rep']))}, "
          f"DDP {', '.join(map(str, summary['ddp']['ratio_to_sum_of_solo_by_rep']))}; "
          f"{time.time() - began:.0f} s, load {os.getloadavg()[0]:.1f}")
    print(json.dumps({"benchmark": "straggler", "model": args.model, "batch": args.batch, "steps": args.steps,
                      "warmup": args.warmup, "world": W, "fraction": args.fraction, "fast_fraction": fast,
                      "slow_fraction": slow, "shares": args.shares, "period_s": args.period, "budget": args.budget,
                      "bracket": args.bracket,
                      "reps": args.reps, "cores": os.cpu_count(), "herd_target_met": herd_ratio >= 0.9,
                      "results": summary, "runs": {f"{s} {c}": v for (s, c), v in runs.items()}}))


if __name__ == "__main__":
    main()
