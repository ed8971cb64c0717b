#!/usr/bin/env python3
"""How fast herd recovers, with default settings (lease 10 s, collective
timeout 30 s), on a real local cluster of 3 workers training an mlp.

Figures, each over --reps repetitions, medians printed:
- kill: SIGKILL of one of 3 workers (daemon and trainer) to the survivors'
  first completed step in the next generation (rank 0's log, one line per
  step: log_interval_steps 1); target 1 s or less;
- coordinator: the coordinator and one of 3 workers SIGKILLed together, the
  coordinator restarted at once (same address and state), the worker not:
  to the survivors' first completed step in a generation without it;
  target 10 s or less;
- readmit: a worker daemon stopped (SIGSTOP) for two leases while its trainer
  runs on, then resumed (SIGCONT), to the first completed step of a 3-rank
  generation that has re-admitted it (same trainer process: no reload);
- restart: every member of the job (3 daemons and their trainers) SIGKILLed,
  as in a power cut, and the daemons started again 1 s later, well inside the
  lease: from the restart to the first completed step of a new generation
  (resumed from the newest checkpoint); target 10 s or less;
- failover: two coordinators on a 3-member etcd on loopback (--store=etcd://,
  --etcd-lease-seconds, default 5), the workers and the CLI given both
  addresses; the leading coordinator SIGKILLed while the job trains: to the
  standby leading (its ready file says so; target 5 s or less), and to the
  job's next committed step, i.e. the first step past the one recorded before
  the kill that `herd status` shows through the new leader. Also printed: the
  trainers' first step after the kill (they train on without a coordinator)
  and whether the job stayed in its generation.
- hang: one trainer of 3 (not rank 0) SIGSTOPped, its daemon alive, the job's
  collective_timeout_seconds 5 (--hang-timeout; 30 is the spec's default):
  to the survivors' first step
  in a 2-rank generation; target the collective timeout plus 2 s;
- islandhang: the same in a job of 4 in two islands (sync.islands_by site,
  workers labelled site=s0, s0, s1, s1; same_host_transport tcp, so each
  island runs the TCP mesh as on two hosts), a trainer of site s0 that is
  not rank 0 SIGSTOPped: to the survivors' first step on 3 ranks; same target.
  Both print where the time went, from the survivors' logs: the failure
  found (the first rank's collective timeout), the failure reported (after
  the roll call, when one is held), the next generation ready, the first step.

Times come from the trainers' own log timestamps against the wall clock at
the signal. Prints one line per repetition and a final JSON line.

--data-plane tcp|gloo starts the workers with that `herd-worker
--data-plane` (default: the daemon's own default, tcp; herd, tcp's old name,
is still accepted). The kill case also
prints how long the survivors' new generation took to be ready (the
trainer's "generation N ready in X s" line: communicators, member handshake
included, and healing), the part of a re-form the data plane changes.

Usage: bench/recovery_bench.py [--reps 3] [--bin-dir bazel-bin]
       [--cases kill,coordinator,readmit,restart,failover,hang,islandhang] [--data-plane tcp|gloo]
       [--etcd-lease-seconds 5] [--hang-timeout 5]
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time

from herdbench.cluster import LocalCluster, build, pids_of, trainer_log, wait_leading, wait_world
from herdbench.local_etcd import LocalEtcd
from herdbench.recovery_job import submit
from herdbench.trainer_logs import READY, STEP, first_step_after, log_events

LEASE = 10.0  # the coordinator's default --lease-seconds


# Extra herd-worker flags for every cluster (--data-plane).
WORKER_ARGS = []
# "generation N ready in X s" of the kill case's re-formed generations.
READY_SECONDS = []
# The failover case: the leader's etcd lease (--etcd-lease-seconds).
ETCD_LEASE = [5]


def ready_seconds(log_path, after_generation):
    """Seconds each generation after `after_generation` took to be ready."""
    found = []
    with open(log_path) as f:
        for line in f:
            m = re.search(r"generation (\d+) ready in ([0-9.]+) s", line)
            if m and int(m.group(1)) > after_generation:
                found.append(float(m.group(2)))
    return found


def measure_kill(bin_dir):
    cluster = LocalCluster(bin_dir, 3, worker_args=lambda i: WORKER_ARGS)
    try:
        job = submit(cluster)
        info = wait_world(cluster, job, 3)
        victim = 2
        for pid in pids_of(f"herd-trainer .*--job={job} .*--worker-id=worker-{victim}( |$)"):
            os.kill(pid, signal.SIGKILL)
        os.killpg(cluster.procs[1 + victim].pid, signal.SIGKILL)
        killed = time.time()
        survivor = 0
        when, generation = first_step_after(trainer_log(cluster, survivor, job), killed, world=2,
                                            min_generation=int(info["generation"]))
        READY_SECONDS.extend(ready_seconds(trainer_log(cluster, survivor, job), int(info["generation"])))
        return when - killed
    finally:
        cluster.herd("cancel", job) if "job" in locals() else None
        cluster.stop()


# collective_timeout_seconds of the hang cases (--hang-timeout): short by
# default, as a job may set it.
HANG_TIMEOUT = [5]
# Where the survivors' time went after a hang (first log line of each, any survivor).
HANG_PHASES = (("failure found", re.compile(r"^generation \d+ failed at rank \d+ \(\w+\): calling the roll")),
               ("failure reported", re.compile(r"^generation \d+ failed at rank \d+: ")),
               ("next generation ready", READY))


def hang_phases(paths, stopped, after_generation):
    """[(phase, seconds after `stopped`)] of HANG_PHASES in the logs `paths`, each the earliest after the stop (the
    ready line: of a generation after `after_generation`); a phase nobody logged is left out."""
    found = []
    for name, pattern in HANG_PHASES:
        times = [when for path in paths for when, message in log_events(path)
                 if when >= stopped and (m := pattern.search(message))
                 and (pattern is not READY or int(m.group(2)) > after_generation)]
        if times:
            found.append((name, min(times) - stopped))
    return found


def measure_hang(bin_dir, islands):
    """(seconds from the SIGSTOP of one trainer to the survivors' first step, [(phase, seconds)])."""
    workers = 4 if islands else 3
    sites = ["s0", "s0", "s1", "s1"]
    labels = (lambda i: ["--label", f"site={sites[i]}"]) if islands else (lambda i: [])
    cluster = LocalCluster(bin_dir, workers, worker_args=lambda i: [*labels(i), *WORKER_ARGS])
    victim = 1  # not rank 0, whose log has every step; with islands at site s0
    stopped_pids = []
    try:
        extra = f"collective_timeout_seconds: {HANG_TIMEOUT[0]}\n"
        if islands:
            extra += ("sync: {mode: average, every: 1, warmup_steps: 0, islands_by: site, min_workers_per_island: 1,\n"
                      "       same_host_transport: tcp, outer: {kind: nesterov, lr: 0.7, momentum: 0.9}}\n")
        job = submit(cluster, extra, max_workers=workers)
        info = wait_world(cluster, job, workers)
        stopped_pids = pids_of(f"herd-trainer .*--job={job} .*--worker-id=worker-{victim}( |$)")
        for pid in stopped_pids:
            os.kill(pid, signal.SIGSTOP)
        stopped = time.time()
        survivors = [trainer_log(cluster, w, job) for w in range(workers) if w != victim]
        when, _ = first_step_after(survivors, stopped, world=workers - 1, min_generation=int(info["generation"]))
        return when - stopped, hang_phases(survivors, stopped, int(info["generation"]))
    finally:
        for pid in stopped_pids:
            os.kill(pid, signal.SIGCONT)
        cluster.herd("cancel", job) if "job" in locals() else None
        cluster.stop()


def measure_coordinator_and_worker(bin_dir):
    cluster = LocalCluster(bin_dir, 3, worker_args=lambda i: WORKER_ARGS)
    try:
        job = submit(cluster)
        info = wait_world(cluster, job, 3)
        victim = 2
        trainers = pids_of(f"herd-trainer .*--job={job} .*--worker-id=worker-{victim}( |$)")
        os.killpg(cluster.procs[0].pid, signal.SIGKILL)  # the coordinator
        for pid in trainers:
            os.kill(pid, signal.SIGKILL)
        os.killpg(cluster.procs[1 + victim].pid, signal.SIGKILL)
        killed = time.time()
        cluster.procs[0].wait()
        cluster.start_coordinator()
        print(f"  coordinator serving again {time.time() - killed:.2f} s after the kill", flush=True)
        when, _ = first_step_after(trainer_log(cluster, 0, job), killed, world=2,
                                   min_generation=int(info["generation"]))
        return when - killed
    finally:
        cluster.herd("cancel", job) if "job" in locals() else None
        cluster.stop()


def measure_readmit(bin_dir):
    cluster = LocalCluster(bin_dir, 3, worker_args=lambda i: WORKER_ARGS)
    try:
        job = submit(cluster)
        info = wait_world(cluster, job, 3)
        daemon = cluster.procs[3]  # worker-2's daemon (procs[0] is the coordinator)
        mine = f"herd-trainer .*--job={job} .*--worker-id=worker-2( |$)"
        trainer = pids_of(mine)
        os.kill(daemon.pid, signal.SIGSTOP)
        time.sleep(2 * LEASE)
        os.kill(daemon.pid, signal.SIGCONT)
        resumed = time.time()
        # Rank 0 logs the steps; a step of a 3-rank generation includes the
        # re-admitted trainer.
        when, _ = first_step_after(trainer_log(cluster, 0, job), resumed, world=3,
                                   min_generation=int(info["generation"]))
        with open(trainer_log(cluster, 2, job)) as f:
            healed = "healed from rank" in f.read()
        if not healed:
            raise RuntimeError("the re-admitted trainer did not heal into the job")
        if pids_of(mine) != trainer:
            raise RuntimeError("the re-admitted worker's trainer was restarted")
        return when - resumed
    finally:
        cluster.herd("cancel", job) if "job" in locals() else None
        cluster.stop()


def measure_restart(bin_dir):
    # Restarted trainers resume from a checkpoint, so every rank must see
    # rank 0's: one checkpoint root for all, as shared storage would be.
    root = tempfile.mkdtemp(prefix="herd-bench-checkpoints-")
    cluster = LocalCluster(bin_dir, 3, worker_args=lambda i: [f"--checkpoint-root={root}", *WORKER_ARGS])
    try:
        # New trainers load the job context (the dataset) again: 100,000
        # samples (2,083 steps an epoch) keep that part of a restart small,
        # as the other cases' 2,000,000 (kept in memory across their
        # generations) would not.
        job = submit(cluster, "checkpoint: {interval_steps: 20, keep: 2}\n", samples=100000)
        info = wait_world(cluster, job, 3)
        deadline = time.time() + 120
        while not cluster.herd_json("checkpoints", job).get("checkpoints"):
            if time.time() > deadline:
                raise RuntimeError(f"job {job} recorded no checkpoint")
            time.sleep(0.2)
        trainers = pids_of(f"herd-trainer .*--job={job} ")
        for worker in range(3):
            os.killpg(cluster.procs[1 + worker].pid, signal.SIGKILL)
        for pid in trainers:
            os.kill(pid, signal.SIGKILL)
        time.sleep(1)  # down for 1 s: the coordinator still counts every member alive
        for worker in range(3):
            cluster.restart_worker(worker, wait=False)
        restarted = time.time()
        when, _ = first_step_after([trainer_log(cluster, w, job) for w in range(3)], restarted,
                                   min_generation=int(info["generation"]))
        return when - restarted
    finally:
        cluster.herd("cancel", job) if "job" in locals() else None
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def first_logged_step(paths, since, timeout=60):
    """The wall time of the first step any of the trainer logs `paths` shows after `since`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = [when for path in paths if os.path.exists(path)
                 for when, message in log_events(path) if when >= since and STEP.match(message)]
        if found:
            return min(found)
        time.sleep(0.2)
    raise RuntimeError(f"no step logged after the kill in {', '.join(paths)}")


def measure_failover(bin_dir):
    """(seconds to the standby leading, to the job's next committed step, to the trainers' first step; whether
    the job kept its generation)."""
    etcd = LocalEtcd(3)
    cluster = None
    try:
        cluster = LocalCluster(bin_dir, 3, worker_args=lambda i: WORKER_ARGS, store=etcd.store(),
                               coordinator_args=[f"--etcd-lease-seconds={ETCD_LEASE[0]}"], standbys=1)
        job = submit(cluster)
        info = wait_world(cluster, job, 3)
        before = cluster.herd_json("status", job)
        os.killpg(cluster.procs[0].pid, signal.SIGKILL)  # the leading coordinator
        killed = time.time()
        led = wait_leading(cluster.standby_ready_file(0), cluster.procs[-1]) - killed
        # The job's next commit, as the new leader records it.
        deadline = time.time() + 120
        while True:
            try:
                now = cluster.herd_json("status", job)
                if int(now.get("step", 0)) > int(before.get("step", 0)):
                    committed = time.time() - killed
                    break
            except RuntimeError:
                pass  # the CLI's own wait for a leader ran out: ask again
            if time.time() > deadline:
                raise RuntimeError(f"job {job} recorded no step past {before.get('step')} after the failover "
                                   f"(logs in {cluster.dir})")
            time.sleep(0.05)
        trained = first_logged_step([trainer_log(cluster, w, job) for w in range(3)], killed) - killed
        same_generation = int(now.get("generation", 0)) == int(info["generation"])
        return led, committed, trained, same_generation
    finally:
        if cluster:
            cluster.herd("cancel", job) if "job" in locals() else None
            cluster.stop()
        etcd.stop()


def main():
    # A SIGTERM (timeout, Ctrl-C in a pipeline) still stops the clusters.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--bin-dir", default="", help="built binaries (default: build them with Bazel)")
    parser.add_argument("--cases", default="kill,coordinator,readmit,restart",
                        help="comma-separated: kill, coordinator, readmit, restart, failover (needs Debian's "
                             "etcd-server), hang, islandhang")
    parser.add_argument("--data-plane", choices=["tcp", "gloo", "herd"], default=None,
                        help="herd-worker --data-plane for every worker (default: the daemon's default)")
    parser.add_argument("--etcd-lease-seconds", type=int, default=ETCD_LEASE[0],
                        help="failover: the coordinators' --etcd-lease-seconds (default: theirs, 5)")
    parser.add_argument("--hang-timeout", type=int, default=HANG_TIMEOUT[0],
                        help="hang, islandhang: the job's collective_timeout_seconds (default 5; the spec's own "
                             "default is 30)")
    args = parser.parse_args()
    if args.hang_timeout < 1:
        parser.error(f"--hang-timeout: {args.hang_timeout} is not a positive number of seconds")
    ETCD_LEASE[0] = args.etcd_lease_seconds
    HANG_TIMEOUT[0] = args.hang_timeout
    if args.data_plane:
        WORKER_ARGS.append(f"--data-plane={args.data_plane}")
    cases = args.cases.split(",")
    unknown = set(cases) - {"kill", "coordinator", "readmit", "restart", "failover", "hang", "islandhang"}
    if unknown:
        parser.error(f"--cases: unknown case(s) {', '.join(sorted(unknown))} "
                     "(expected kill, coordinator, readmit, restart, failover, hang, islandhang)")
    bin_dir = args.bin_dir or build()
    kills, coordinators, readmits, restarts = [], [], [], []
    takeovers, failover_commits, failover_trained, failover_same_generation = [], [], [], []
    hangs = {"hang": [], "islandhang": []}
    for rep in range(args.reps):
        if "kill" in cases:
            kills.append(measure_kill(bin_dir))
            print(f"rep {rep + 1}: SIGKILL of 1 of 3 -> survivors' first step: {kills[-1]:.2f} s", flush=True)
        if "coordinator" in cases:
            coordinators.append(measure_coordinator_and_worker(bin_dir))
            print(f"rep {rep + 1}: SIGKILL of the coordinator and 1 of 3 workers -> survivors' first step: "
                  f"{coordinators[-1]:.2f} s", flush=True)
        if "readmit" in cases:
            readmits.append(measure_readmit(bin_dir))
            print(f"rep {rep + 1}: daemon back after 2 leases -> its trainer's first step re-admitted: "
                  f"{readmits[-1]:.2f} s", flush=True)
        if "restart" in cases:
            restarts.append(measure_restart(bin_dir))
            print(f"rep {rep + 1}: every member killed and restarted within the lease -> first step: "
                  f"{restarts[-1]:.2f} s", flush=True)
        if "failover" in cases:
            led, committed, trained, same = measure_failover(bin_dir)
            takeovers.append(led)
            failover_commits.append(committed)
            failover_trained.append(trained)
            failover_same_generation.append(same)
            print(f"rep {rep + 1}: leading coordinator killed -> standby leads: {led:.2f} s, job's next committed "
                  f"step: {committed:.2f} s (trainers' first step {trained:.2f} s, "
                  f"{'same' if same else 'a new'} generation)", flush=True)
        for case in ("hang", "islandhang"):
            if case in cases:
                seconds, phases = measure_hang(bin_dir, islands=case == "islandhang")
                hangs[case].append(seconds)
                where = ", ".join(f"{name} {at:.2f} s" for name, at in phases)
                print(f"rep {rep + 1}: {'a trainer of an islands job' if case == 'islandhang' else 'a trainer of 3'} "
                      f"stopped -> survivors' first step: {seconds:.2f} s ({where})", flush=True)
    median = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    result = {"kill_to_resumed_s": median(kills), "coordinator_and_worker_to_resumed_s": median(coordinators),
              "return_to_readmitted_s": median(readmits), "whole_restart_to_resumed_s": median(restarts),
              "kills": kills, "coordinator_kills": coordinators, "readmits": readmits, "restarts": restarts, "lease_s": LEASE, "reps": args.reps,
              "data_plane": args.data_plane or "default", "reform_ready_s": READY_SECONDS,
              "failover_to_leading_s": median(takeovers), "failover_to_committed_s": median(failover_commits),
              "failover_to_trained_s": median(failover_trained), "failover_takeovers": takeovers,
              "failover_commits": failover_commits, "failover_same_generation": failover_same_generation,
              "etcd_lease_s": ETCD_LEASE[0], "hang_to_resumed_s": median(hangs["hang"]),
              "islandhang_to_resumed_s": median(hangs["islandhang"]), "hangs": hangs["hang"],
              "islandhangs": hangs["islandhang"], "hang_collective_timeout_s": HANG_TIMEOUT[0]}
    for name, key, target in (("kill -> resumed", "kill_to_resumed_s", " (target <= 1 s)"),
                              ("coordinator and worker killed -> resumed", "coordinator_and_worker_to_resumed_s",
                               " (target <= 10 s)"),
                              ("return -> re-admitted", "return_to_readmitted_s", ""),
                              ("every member restarted -> resumed", "whole_restart_to_resumed_s",
                               " (target <= 10 s)"),
                              ("leader killed -> standby leads", "failover_to_leading_s", " (target <= 5 s)"),
                              ("leader killed -> job's next committed step", "failover_to_committed_s", ""),
                              ("leader killed -> trainers' next step", "failover_to_trained_s", ""),
                              ("trainer hung -> resumed", "hang_to_resumed_s", f" (target <= {HANG_TIMEOUT[0] + 2} s)"),
                              ("islands job's trainer hung -> resumed", "islandhang_to_resumed_s",
                               f" (target <= {HANG_TIMEOUT[0] + 2} s)")):
        if result[key] is not None:
            print(f"median {name} {result[key]:.2f} s{target}")
    if READY_SECONDS:
        print(f"re-formed generations ready in (s): {', '.join(f'{x:.3f}' for x in READY_SECONDS)}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
