#!/usr/bin/env python3
"""What a planned departure costs a running job: drain (SIGTERM to one
worker daemon of 3, as a pod deletion or a spot notice) against SIGKILL of
that worker, on a real local cluster training an mlp with default settings
(lease 10 s, collective timeout 30 s) and log_interval_steps 1.

Per repetition and mode:
- notice -> re-formed: from the signal to the survivors' first completed step
  in a 2-rank generation (rank 0's log timestamps);
- steps lost: the last step rank 0 completed in the old generation minus the
  step the new generation resumed from (`healed from ... at step N`): steps
  that will be trained again;
- drain only: signal -> the daemon's exit, and its exit code.

Usage: bench/drain_bench.py [--reps 3] [--bin-dir bazel-bin]
"""
import argparse
import json
import os
import re
import signal
import statistics
import sys
import time

from herdbench.cluster import LocalCluster, build, pids_of, trainer_log, wait_world
from herdbench.recovery_job import submit
from herdbench.trainer_logs import READY, STEP, first_step_after, log_events

HEALED = re.compile(r"^generation (\d+): healed from .* at step (\d+)")


def steps_lost(path, old_generation):
    """Last step rank 0 finished in generation `old_generation` minus the step
    the next generation healed to."""
    last_old, healed, generation = 0, None, None
    for _, message in log_events(path):
        m = READY.search(message)
        if m:
            generation = int(m.group(2))
            continue
        s = STEP.match(message)
        if s and generation == old_generation:
            last_old = int(s.group(1))
        h = HEALED.search(message)  # logged before its generation's ready line
        if h and int(h.group(1)) > old_generation:
            healed = int(h.group(2))
            break
    if healed is None:
        raise RuntimeError(f"no heal after generation {old_generation} in {path}")
    return last_old - healed


def measure(bin_dir, mode):
    cluster = LocalCluster(bin_dir, 3)
    try:
        job = submit(cluster)
        info = wait_world(cluster, job, 3)
        old_generation = int(info["generation"])
        daemon = cluster.procs[3]  # worker-2's daemon (procs[0] is the coordinator)
        if mode == "drain":
            os.kill(daemon.pid, signal.SIGTERM)
        else:
            for pid in pids_of(f"herd-trainer .*--job={job} .*--worker-id=worker-2( |$)"):
                os.kill(pid, signal.SIGKILL)
            os.killpg(daemon.pid, signal.SIGKILL)
        notice = time.time()
        # Ready lines name the generation; the survivors' first 2-rank step is the re-formed job.
        when, _ = first_step_after(trainer_log(cluster, 0, job), notice, world=2, min_generation=old_generation)
        result = {"notice_to_reformed_s": when - notice,
                  "steps_lost": steps_lost(trainer_log(cluster, 0, job), old_generation)}
        if mode == "drain":
            code = daemon.wait(timeout=60)
            result["daemon_exit_s"] = time.time() - notice
            result["daemon_exit_code"] = code
        return result
    finally:
        cluster.herd("cancel", job) if "job" in locals() else None
        cluster.stop()


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--bin-dir", default="", help="built binaries (default: build them with Bazel)")
    args = parser.parse_args()
    bin_dir = args.bin_dir or build()
    runs = {"drain": [], "sigkill": []}
    for rep in range(args.reps):
        for mode in runs:
            runs[mode].append(measure(bin_dir, mode))
            print(f"rep {rep + 1} {mode}: {json.dumps(runs[mode][-1])}", flush=True)
    summary = {mode: {"median_notice_to_reformed_s": statistics.median(r["notice_to_reformed_s"] for r in rs),
                      "max_steps_lost": max(r["steps_lost"] for r in rs)} for mode, rs in runs.items()}
    for mode, s in summary.items():
        print(f"{mode}: median notice -> re-formed {s['median_notice_to_reformed_s']:.2f} s, "
              f"steps lost at most {s['max_steps_lost']}")
    print(json.dumps({"summary": summary, "runs": runs, "reps": args.reps}))


if __name__ == "__main__":
    main()
