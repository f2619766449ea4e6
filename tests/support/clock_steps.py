"""Moving a ManualClock (kube_gpu_exporter/exporter/simulator/stepped_time.py) under threads that
wait on it: until they are parked, to the end of the soonest wait, until something holds. A thread
the last advance() woke may not have left its wait yet, or run the round it woke for: these helpers
wait, in real time and within a deadline, until every thread they count waits again with time
left."""

from __future__ import annotations

import time
from collections.abc import Callable

from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock
from tests.conftest import wait_for

# The most a helper waits in real time for threads to park or a condition to hold.
REAL_SECONDS = 10.0
_POLL_SECONDS = 0.001


def settled(clock: ManualClock, threads: int) -> bool:
    """Whether exactly `threads` threads wait on `clock`, each with time still to wait. A wait
    that has just ended does not count: its thread has yet to run the round it woke for and
    wait again."""
    left = clock.waiting()
    return len(left) == threads and all(seconds > 0 for seconds in left)


def parked(clock: ManualClock, threads: int, timeout: float = REAL_SECONDS) -> list[float]:
    """Wait, in real time, until `settled(clock, threads)`, and return how long each of those
    threads has left to wait. Once this returns, whatever they did at the last `advance()` is
    done and visible. A wait cut short by its event (a helper woken for new GPUs) is another
    matter: its thread still looks parked until it notices, up to ManualClock.POLL_SECONDS
    later, so wait for what that wake-up does first."""
    limit = time.monotonic() + timeout
    while not settled(clock, threads):
        if time.monotonic() > limit:
            raise AssertionError(f"{threads} threads to wait on the clock: {clock.waiting()}")
        time.sleep(_POLL_SECONDS)
    return clock.waiting()


def step(clock: ManualClock, threads: int) -> float:
    """Move `clock` on to the soonest end of a wait of the `threads` threads waiting on it, and
    return once they wait again; how far the clock moved."""
    parked(clock, threads)
    moved = clock.advance_to_next_wake()
    parked(clock, threads)
    return moved


def step_until(
    clock: ManualClock, threads: int, done: Callable[[], object], steps: int = 100
) -> list[float]:
    """`step` until `done()` holds (checked before each step); how far each step moved."""
    moved: list[float] = []
    while not done():
        assert len(moved) < steps, f"not done after {steps} steps: {moved}"
        moved.append(step(clock, threads))
    return moved


def within_jitter(wait: float, nominal: float) -> bool:
    """Whether a backoff's wait is its nominal length within kube_gpu_exporter/exporter/backoff.py's
    jitter, 20% either way."""
    return 0.8 * nominal <= wait <= 1.2 * nominal


def at_least_parked(
    clock: ManualClock, count: int = 1, timeout: float = REAL_SECONDS
) -> list[float]:
    """What is left of each wait, soonest first, once at least `count` threads are parked with
    time still to wait. A thread that the last advance() woke may not have left its wait yet: it
    has nothing left to wait, and is not counted."""
    left: list[float] = []

    def enough() -> bool:
        nonlocal left
        left = [seconds for seconds in clock.waiting() if seconds > 0]
        return len(left) >= count

    assert wait_for(enough, timeout, step=0.001), f"{len(left)} of {count} threads parked"
    return left


def run_until(
    clock: ManualClock, condition: Callable[[], object], timeout: float = REAL_SECONDS
) -> bool:
    """Wait (at most `timeout` in real time) for `condition`, moving the clock on to the end of
    the soonest wait whenever it is not met yet: time passes as fast as the threads allow. For
    tests about what happens in the end, not about how long each wait was."""

    def stepped() -> bool:
        if condition():
            return True
        left = [seconds for seconds in clock.waiting() if seconds > 0]
        if left:
            clock.advance(min(left))
        return False

    return wait_for(stepped, timeout, step=0.001)
