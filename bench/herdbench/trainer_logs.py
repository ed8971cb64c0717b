"""What the benchmarks read from herd's trainer logs (glog lines, local time)."""
import datetime
import os
import re
import time

LOG_TIME = re.compile(r"^I\d{8} (\d\d):(\d\d):(\d\d\.\d+) .* step (\d+)/\d+ ")
LINE = re.compile(r"^[IWE](\d{8}) (\d\d:\d\d:\d\d\.\d+) .*?\] (.*)$")  # info, warning, error
READY = re.compile(r"rank \d+/(\d+) generation (\d+) ready in")
STEP = re.compile(r"^step (\d+)/")
# Each rank's end-of-training sync summary line.
SUMMARY = re.compile(r"(all-reduce|averaging): (\d+) (?:steps|rounds), (\d+) bytes sent \(([0-9.]+) bytes/sample\)"
                     r".*?(\d+) samples in ([0-9.]+) s of training")


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


def timed_seconds(cluster, job, info, warmup, steps):
    """Wall seconds of a finished job's timed steps: between rank 0's commit-point lines at step `warmup`
    and step `warmup + steps` (the job logs every `warmup` steps). `info` is the job's final status."""
    times = step_times(os.path.join(cluster.dir, info["workers"][0], "jobs", job, "trainer.log"))
    start, end = times[warmup], times[warmup + steps]
    if end < start:
        end += 86400  # crossed midnight
    return end - start


def log_events(path):
    """[(unix seconds, message)] of a trainer log (glog stamps local time)."""
    events = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                when = datetime.datetime.strptime(m.group(1) + " " + m.group(2), "%Y%m%d %H:%M:%S.%f")
                events.append((when.timestamp(), m.group(3)))
    return events


def scan_first_step(path, since, world=None, min_generation=0):
    """(wall time, generation) of the first step logged after a generation
    (of `world` ranks, newer than `min_generation`) became ready after
    `since`, or None (yet)."""
    if not os.path.exists(path):
        return None
    ready = None
    for when, message in log_events(path):
        if when < since:
            continue
        m = READY.search(message)
        if m and (world is None or int(m.group(1)) == world) and int(m.group(2)) > min_generation:
            ready = (when, int(m.group(2)))
        elif ready and STEP.match(message):
            return when, ready[1]
    return None


def first_step_after(paths, since, world=None, min_generation=0, timeout=120):
    """The earliest scan_first_step over the trainer logs `paths` (one path
    or several: only rank 0 logs steps, and a re-formed job may give rank 0
    to any worker)."""
    paths = [paths] if isinstance(paths, str) else paths
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = [r for r in (scan_first_step(p, since, world, min_generation) for p in paths) if r]
        if found:
            return min(found)
        time.sleep(0.2)
    raise RuntimeError(f"no step after a new generation in {', '.join(paths)}")
