"""Slow a process down from outside, without cgroups: duty-cycle it with
SIGSTOP/SIGCONT.

A background thread lets the process run for part of every `period` seconds
and holds it stopped for the rest, so a CPU-bound process runs at about
`fraction` of its speed. SIGSTOP stops every thread of the process (the
whole thread group), so a multi-threaded trainer slows as a whole. What
"part" means is the `budget`:

- "cpu" (a CPU-time quota, what cgroup v2's cpu.max enforces): in each
  period the process may use `fraction` x `period` seconds of CPU time, all
  its threads together (its process CPU clock). It runs from the period's
  start until it has used that, then is stopped until the period ends. A
  process that other load kept off the CPU for part of the period catches up
  later in it, while a core is free; so several throttled processes sharing
  fewer cores each still get their quota as long as the quotas fit the
  cores. Time it spends blocked (waiting for a peer) is not charged, and
  quota left unused at a period's end is lost, as with cgroups. Use this to
  make a machine act as several slower cores.
- "deadline": the kernel enforces the quota: the process's main thread gets
  SCHED_DEADLINE with `fraction` x `period` of runtime every `period`
  (sched_setattr; needs CAP_SYS_NICE). No signals, no controlling thread on
  the process's path, and a thread woken after it blocked starts a fresh
  budget at once rather than at a fixed period's boundary. Only the main
  thread is held (the trainers and DDP ranks compute there; the kernel's
  admission test counts every deadline thread's reservation, idle or not):
  its other threads run unthrottled, which the process's CPU clock shows.
  The kernel refuses reservations that would take more than 95% of the
  cores. Threads the main thread creates start as ordinary threads.
- "wall": the process runs for `fraction` x `period` of wall time each
  period, whether or not it got a core then (on a loaded machine it loses
  part of each running window to the other load). The stopped time is
  steered on the running totals, not per cycle: a controlling thread that
  wakes late lengthens one pause, and the next ones are shortened to bring
  the stopped share back to 1 - fraction.

The process is signalled through a pidfd, so a PID reused after it exits is
never signalled; the thread ends by itself when the process does. The
process is always left running (SIGCONT) when the cycle stops.

For benches and tests only (bench/straggler_bench.py): the product has no
knob for this.

    with DutyCycle(pid, fraction=0.5, period=0.04, budget="cpu") as slow:
        ...                      # the process runs at about half a core
    print(slow.stopped_fraction(), slow.cpu_share())
    print(slow.window(begin, end))  # CPU and run-queue wait between two wall times

The cycle reads the process's CPU clock at least once a period and keeps
each reading, with the time its main thread has waited on a run queue
(runnable, no core free), so a caller can see what the process got over any
part of the run, e.g. a bench's timed steps without its warmup. A process
on a core of its own never waits there; several throttled processes sharing
fewer cores do, and that wait is CPU time their quota allowed but they did
not get.
"""
import ctypes
import errno
import os
import platform
import select
import struct
import signal
import threading
import time


BUDGETS = ("cpu", "deadline", "wall")


def run_queue_wait(pid):
    """Seconds the process's main thread has spent runnable but waiting for a core (the second field of
    /proc/PID/schedstat); None once it is gone. Only the main thread: the trainers and DDP ranks compute
    there, and their other threads, woken by every SIGSTOP/SIGCONT, would count waits that cost nothing."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def process_cpu_clock(pid):
    """The clock id of a process's CPU time, all threads (Linux's MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED),
    what clock_getcpuclockid(3) returns; Python has no wrapper for it). Read from another process while it
    runs, it lags by up to a scheduler tick (the kernel adds a running thread's current slice only for the
    caller's own threads); once the process is stopped it is exact. A thread's own clock would not lag, but
    Linux lets only the thread's own process read it."""
    return (~pid << 3) | 2


SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}  # Python has no wrapper for sched_setattr(2)
SCHED_OTHER, SCHED_DEADLINE = 0, 6
SCHED_FLAG_RESET_ON_FORK = 1


def set_scheduling(tid, policy, runtime_s=0.0, period_s=0.0):
    """sched_setattr(2) on one thread: SCHED_DEADLINE with runtime_s of every period_s (deadline = period), or
    back to SCHED_OTHER. Raises OSError naming what the kernel refused."""
    flags = SCHED_FLAG_RESET_ON_FORK if policy == SCHED_DEADLINE else 0
    # struct sched_attr: size, policy, flags, nice, priority, runtime, deadline, period (ns)
    attr = struct.pack("IIQiIQQQ", 48, policy, flags, 0, 0, int(runtime_s * 1e9), int(period_s * 1e9),
                       int(period_s * 1e9))
    number = SYS_SCHED_SETATTR.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"sched_setattr: no syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, tid, ctypes.create_string_buffer(attr, len(attr)), 0) != 0:
        code = ctypes.get_errno()
        why = {errno.EPERM: "needs CAP_SYS_NICE (run as root, or use the cpu budget)",
               errno.EBUSY: "the kernel's admission test refused it: deadline reservations may take at most "
                            "95% of the cores (kernel.sched_rt_runtime_us)"}.get(code, os.strerror(code))
        what = (f"SCHED_DEADLINE {runtime_s * 1e3:.2f} ms of every {period_s * 1e3:.2f} ms"
                if policy == SCHED_DEADLINE else "SCHED_OTHER")
        raise OSError(code, f"{what} for thread {tid}: {why}")


class DutyCycle:
    def __init__(self, pid, fraction=0.5, period=0.04, budget="wall"):
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        if period <= 0:
            raise ValueError(f"period must be > 0, got {period}")
        if budget not in BUDGETS:
            raise ValueError(f"budget must be one of {', '.join(BUDGETS)}, got {budget!r}")
        self.pid = pid
        self.fraction = fraction
        self.period = period
        self.budget = budget
        self.pidfd = os.pidfd_open(pid)  # fails at once (ProcessLookupError) if the process is gone
        self._clock = process_cpu_clock(pid)
        self._cpu_at_start = None  # the process's CPU time at start()
        self._cpu_seen = None  # (its CPU time, time.time()) at the last reading: what is known once it exits
        self.readings = []  # (time.time(), CPU time, run-queue wait) at every reading, for window()
        self.running_s = 0.0  # time the process was let run, and held stopped
        self.stopped_s = 0.0
        self.cycles = 0
        self.started_at = None  # time.time() at start() and when the cycle ended
        self.ended_at = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"duty-cycle-{pid}", daemon=True)

    def start(self):
        if self._deadline():
            set_scheduling(self.pid, SCHED_DEADLINE, self.fraction * self.period, self.period)
        self.started_at = time.time()
        self._cpu_at_start = self._cpu_time()
        self._thread.start()
        return self

    def _deadline(self):
        return self.budget == "deadline" and self.fraction < 1

    def stop(self):
        """Ends the cycle and leaves the process running; returns self."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        self._signal(signal.SIGCONT)
        if self._deadline():
            try:
                if not select.select([self.pidfd], [], [], 0)[0]:  # still running
                    set_scheduling(self.pid, SCHED_OTHER)
            except (OSError, ValueError):
                pass  # exited since, or stopped before
        if self.ended_at is None:
            self.ended_at = time.time()
        try:
            os.close(self.pidfd)
        except OSError:
            pass
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def stopped_fraction(self):
        total = self.running_s + self.stopped_s
        return self.stopped_s / total if total else 0.0

    def cpu_share(self):
        """CPU time the process used while cycled (up to its last reading, if it exited), per wall second:
        cores' worth; None if never read."""
        if self.ended_at is None:
            self._cpu_time()
        if self._cpu_at_start is None or self._cpu_seen is None:
            return None
        cpu, at = self._cpu_seen
        return (cpu - self._cpu_at_start) / (at - self.started_at) if at > self.started_at else None

    def window(self, begin, end):
        """(CPU time, main thread's run-queue wait) per wall second between the first and the last reading
        inside [begin, end] (time.time() values); None with fewer than two readings there."""
        inside = [r for r in self.readings if begin <= r[0] <= end and r[2] is not None]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        (t0, cpu0, queued0), (t1, cpu1, queued1) = inside[0], inside[-1]
        return (cpu1 - cpu0) / (t1 - t0), (queued1 - queued0) / (t1 - t0)

    def _cpu_time(self):
        """The process's CPU time so far, seconds; None once it is gone."""
        try:
            cpu = time.clock_gettime(self._clock)
        except OSError:
            return None
        now = time.time()
        self._cpu_seen = (cpu, now)
        self.readings.append((now, cpu, run_queue_wait(self.pid)))
        return cpu

    def _signal(self, sig):
        """False once the process is gone (or the pidfd closed)."""
        try:
            signal.pidfd_send_signal(self.pidfd, sig)
            return True
        except (ProcessLookupError, OSError):
            return False

    def _exited(self, timeout):
        """Waits up to `timeout` seconds (or until stop()); True if the process exited or stop() was called."""
        if timeout > 0:
            readable, _, _ = select.select([self.pidfd], [], [], timeout)  # a pidfd is readable once it exits
            if readable:
                return True
        return self._done.is_set()

    def _hold_stopped(self, began, seconds):
        """Counts [began, now) as running, stops the process for up to `seconds` and counts that as stopped.
        False once it should end: the process is gone, or stop() was called."""
        paused = time.monotonic()
        self.running_s += paused - began
        if not self._signal(signal.SIGSTOP):
            return False
        exited = self._exited(seconds)
        self.stopped_s += time.monotonic() - paused
        self.cycles += 1
        return not exited

    def _run(self):
        if self.fraction >= 1 or self.budget == "deadline":  # readings only: the kernel holds a deadline thread
            while not self._exited(self.period):
                self._cpu_time()
            self._cpu_time()
            return
        try:
            if self.budget == "cpu":
                self._run_cpu_quota()
                return
            while not self._done.is_set():
                began = time.monotonic()
                if not self._signal(signal.SIGCONT) or self._exited(self.fraction * self.period):
                    break
                # Stop long enough that stopped / (running + stopped) returns to 1 - fraction.
                running_s = self.running_s + time.monotonic() - began
                target = running_s * (1 - self.fraction) / self.fraction - self.stopped_s
                held = self._hold_stopped(began, min(max(target, 0.0), 4 * self.period))
                self._cpu_time()
                if not held:
                    break
        finally:
            self._cpu_time()
            self._signal(signal.SIGCONT)
            self.ended_at = time.time()

    def _run_cpu_quota(self):
        """budget "cpu": run each period until the quota is used, stopped for the rest of the period. The
        process's CPU clock lags while it runs (process_cpu_clock), so the stop lands up to a scheduler tick
        late; what ran past the quota is read exactly once the process is stopped and charged to the next
        periods (a period whose quota is all owed stays stopped), so the long-run share is exact. Quota left
        unused at a period's end is lost."""
        quota = self.fraction * self.period
        owed = 0.0  # CPU time used past the quotas so far
        period_end = time.monotonic()
        while not self._done.is_set():
            period_end = max(period_end + self.period, time.monotonic())  # no burst after a late wake-up
            began = time.monotonic()
            at_start = self._cpu_time()
            allowed = quota - owed
            if at_start is None:
                return
            if allowed > 0:
                if not self._signal(signal.SIGCONT):
                    return
                used = 0.0
                while True:  # a one-thread process uses at most one CPU second per wall second: sleep what is left
                    now = time.monotonic()
                    if used >= allowed or now >= period_end:
                        break
                    if self._exited(min(allowed - used, period_end - now)):
                        return
                    cpu = self._cpu_time()
                    if cpu is None:
                        return
                    used = cpu - at_start
            if time.monotonic() < period_end:
                if not self._hold_stopped(began, period_end - time.monotonic()):
                    return
            else:
                self.running_s += time.monotonic() - began
            cpu = self._cpu_time()  # exact if the process is stopped now
            if cpu is None:
                return
            owed = max(0.0, (cpu - at_start) - allowed) if allowed > 0 else owed - quota
