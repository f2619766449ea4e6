"""Time that moves only when told to.

- `SteppedHelpers`: helper rounds on demand. A poller's helpers normally sample on threads of
  their own, on the real clock. A test or a benchmark that moves the simulator's clock by hand
  (the golden scrape, the cluster history) wants each round to happen at a simulated instant it
  chose: it hands the poller a SteppedHelpers and calls `run_once()` between sweeps.
- `ManualClock`: a clock (kube_gpu_exporter/exporter/clock.py) for the components that wait, stepped
  by hand, so that a backoff of thirty seconds passes in a microsecond.
"""

from __future__ import annotations

import threading
import time

from kube_gpu_exporter.exporter.nvml.helper import ThreadedHelpers


class SteppedHelpers(ThreadedHelpers):
    """A poller's HelperRunner that starts no helper thread and runs every helper's round when
    told (the XID drain runs in every sweep anyway)."""

    def start(self) -> None:
        """Nothing runs on a thread of its own."""

    def run_once(self) -> None:
        """One round of every helper now, on this thread; the poller's next sweep reports them."""
        for helper in self._helpers:
            helper.run_once()


class ManualClock:
    """A `Clock` (kube_gpu_exporter/exporter/clock.py) that moves only when told: `advance()` steps
    it, and every thread waiting on it wakes at the instant its wait ends, in simulated time. A
    thread whose event is set wakes within POLL_SECONDS of real time, since an Event cannot say it
    was set.

    Tests drive background threads with it: start the thread, `wait_for_waiters()` until it is
    parked in a wait, `advance()` past the wait, and look at what it did."""

    POLL_SECONDS = 0.005

    def __init__(self, start: float = 1000.0, wall_start: float = 1.7e9) -> None:
        self._now = start
        self._wall_offset = wall_start - start
        self._cond = threading.Condition()
        # Simulated instant each parked thread wakes at, by a key of its own.
        self._waiting: dict[int, float] = {}
        self._next_key = 0

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._now + self._wall_offset

    def wait(self, event: threading.Event, seconds: float) -> bool:
        with self._cond:
            deadline = self._now + max(0.0, seconds)
            key = self._next_key
            self._next_key += 1
            self._waiting[key] = deadline
            self._cond.notify_all()
            try:
                while not event.is_set() and self._now < deadline:
                    self._cond.wait(self.POLL_SECONDS)
            finally:
                del self._waiting[key]
                self._cond.notify_all()
            return event.is_set()

    def advance(self, seconds: float) -> None:
        """Move time on by `seconds`, waking every wait that ends by then."""
        with self._cond:
            self._now += seconds
            self._cond.notify_all()

    def waiting(self) -> list[float]:
        """How far each parked thread's wait still has to go, soonest first."""
        with self._cond:
            return sorted(deadline - self._now for deadline in self._waiting.values())

    def wait_for_waiters(self, count: int = 1, timeout: float = 10.0) -> list[float]:
        """Block (in real time, at most `timeout`) until at least `count` threads are parked in
        a wait; what waiting() then says. AssertionError when they never get there."""
        limit = time.monotonic() + timeout
        with self._cond:
            while len(self._waiting) < count:
                left = limit - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self._waiting)} of {count} threads are waiting")
                self._cond.wait(left)
            return sorted(deadline - self._now for deadline in self._waiting.values())

    def advance_to_next_wake(self) -> float:
        """Move time on to the end of the soonest wait in progress; how far that was."""
        with self._cond:
            if not self._waiting:
                raise AssertionError("nothing is waiting on the clock")
            step = max(0.0, min(self._waiting.values()) - self._now)
            self._now += step
            self._cond.notify_all()
            return step
