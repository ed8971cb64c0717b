"""Slow a process down from outside, without cgroups: duty-cycle it with
SIGSTOP/SIGCONT.

A background thread lets the process run for `fraction` of every `period`
seconds and holds it stopped for the rest, so a CPU-bound process runs at
about `fraction` of its speed (less on a loaded machine, where it also loses
part of each running window to the other load: measure the slowed rate).
SIGSTOP stops every thread of the process (the whole thread group), so a
multi-threaded trainer slows as a whole.

The stopped time is steered on the running totals, not per cycle: a
controlling thread that wakes late (a loaded machine) lengthens one pause,
and the next ones are shortened to bring the stopped share back to
1 - fraction. The process is signalled through a pidfd, so a PID reused after
it exits is never signalled; the thread ends by itself when the process does.
The process is always left running (SIGCONT) when the cycle stops.

For benches and tests only (bench/straggler_bench.py): the product has no
knob for this.

    with DutyCycle(pid, fraction=0.5, period=0.04) as slow:
        ...                      # the process runs at about half speed
    print(slow.stopped_fraction())
"""
import os
import select
import signal
import threading
import time


class DutyCycle:
    def __init__(self, pid, fraction=0.5, period=0.04):
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        if period <= 0:
            raise ValueError(f"period must be > 0, got {period}")
        self.pid = pid
        self.fraction = fraction
        self.period = period
        self.pidfd = os.pidfd_open(pid)  # fails at once (ProcessLookupError) if the process is gone
        self.running_s = 0.0  # time the process was let run, and held stopped
        self.stopped_s = 0.0
        self.cycles = 0
        self.started_at = None  # time.time() at start() and when the cycle ended
        self.ended_at = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"duty-cycle-{pid}", daemon=True)

    def start(self):
        self.started_at = time.time()
        self._thread.start()
        return self

    def stop(self):
        """Ends the cycle and leaves the process running; returns self."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        self._signal(signal.SIGCONT)
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

    def _run(self):
        if self.fraction >= 1:
            self._done.wait()
            return
        try:
            while not self._done.is_set():
                began = time.monotonic()
                if not self._signal(signal.SIGCONT) or self._exited(self.fraction * self.period):
                    break
                paused = time.monotonic()
                self.running_s += paused - began
                if not self._signal(signal.SIGSTOP):
                    break
                # Stop long enough that stopped / (running + stopped) returns to 1 - fraction.
                target = self.running_s * (1 - self.fraction) / self.fraction - self.stopped_s
                exited = self._exited(min(max(target, 0.0), 4 * self.period))
                self.stopped_s += time.monotonic() - paused
                self.cycles += 1
                if exited:
                    break
        finally:
            self._signal(signal.SIGCONT)
            self.ended_at = time.time()
