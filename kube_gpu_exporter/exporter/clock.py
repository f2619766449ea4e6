"""The clock that timers, backoffs and waits read: the system's in production, a stepped one in
tests and the simulator (kube_gpu_exporter/exporter/simulator/stepped_time.py, `ManualClock`).

A component that waits for time to pass (a retry after a backoff, the next round of a loop, a
re-check ten minutes on) takes a `Clock` instead of calling `time.monotonic()` and
`Event.wait()` itself, so that a test can move time on by an hour in a microsecond and see what
the component did at each instant. Components that only read the time keep taking a plain
`Callable[[], float]`, `clock.monotonic`.

What a clock cannot replace: deadlines on real sockets (a read blocked in the kernel wakes on the
kernel's time), and threads other code starts. Those stay on the system's clock.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for intervals and deadlines."""
        ...

    def time(self) -> float:
        """Seconds since the epoch, for timestamps that people read."""
        ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Block until `event` is set or `seconds` have passed on this clock, as Event.wait();
        True if the event is set."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


SYSTEM_CLOCK: Clock = SystemClock()
