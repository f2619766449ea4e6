"""Recent events per entity, for dcgm-exporter's windowed counts (DCGM_EXP_XID_ERRORS_COUNT and
DCGM_EXP_CLOCK_EVENTS_COUNT): how many events of each value (an XID code, a clock-event reason
mask) happened within the last `window_ms` milliseconds.

Only built when a --collectors file lists one of those families: without it, no event times are
kept at all.

Memory bound. Events are not kept one by one but as runs: a run is (time of its first event,
value, number of events), and an event joins the newest run of its value when that run began less
than `window / RUN_SLICES` earlier. A key then holds at most about RUN_SLICES runs per distinct
value, and never more than MAX_RUNS: past that the oldest run is dropped, so an XID storm of many
codes at once costs MAX_RUNS runs per entity (a few hundred KiB), however long it lasts. The
price is precision at the window's far edge: an event that joined a run leaves the window with
the run's first event, up to window / RUN_SLICES early (300 ms for dcgm-exporter's default 5
minutes), and only a storm with more than MAX_RUNS (code, slice) pairs in one window loses counts.
A lone event keeps its exact time.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

RUN_SLICES = 1024
MAX_RUNS = 2048


@dataclass(slots=True)
class _Run:
    at: float  # its first event's time
    value: int
    events: int = 1


class _Runs:
    def __init__(self) -> None:
        self.runs: deque[_Run] = deque()
        # The newest run of each value: the only one a new event of that value may join.
        self.newest: dict[int, _Run] = {}

    def add(self, at: float, value: int, slice_seconds: float) -> None:
        run = self.newest.get(value)
        if run is not None and at - run.at < slice_seconds:
            run.events += 1
            return
        if len(self.runs) >= MAX_RUNS:
            self._drop_oldest()
        run = _Run(at, value)
        self.runs.append(run)
        self.newest[value] = run

    def prune(self, since: float) -> None:
        """Drop the runs whose first event is at or before `since`."""
        while self.runs and self.runs[0].at <= since:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        run = self.runs.popleft()
        if self.newest.get(run.value) is run:
            del self.newest[run.value]

    def counts(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for run in self.runs:
            out[run.value] = out.get(run.value, 0) + run.events
        return out


class EventWindow(Generic[K]):
    """Events per key within the last `window_ms`, read on `clock` (monotonic seconds).

    Not locked: its owner (the XID book, the clock-event counts) holds its own lock around it."""

    def __init__(self, window_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        if window_ms <= 0:
            raise ValueError(f"an event window must be positive, not {window_ms} ms")
        self.window_ms = window_ms
        self._seconds = window_ms / 1000.0
        self._slice = self._seconds / RUN_SLICES
        self._clock = clock
        self._keys: dict[K, _Runs] = {}

    def add(self, key: K, value: int) -> None:
        now = self._clock()
        runs = self._keys.get(key)
        if runs is None:
            runs = self._keys[key] = _Runs()
        else:
            runs.prune(now - self._seconds)
        runs.add(now, value, self._slice)

    def counts(self, key: K) -> tuple[tuple[int, int], ...]:
        """(value, events) within the window ending now, sorted by value; () when none."""
        runs = self._keys.get(key)
        if runs is None:
            return ()
        runs.prune(self._clock() - self._seconds)
        if not runs.runs:
            del self._keys[key]  # a key that stays quiet costs nothing
            return ()
        return tuple(sorted(runs.counts().items()))

    def runs(self, key: K) -> int:
        """How many runs `key` holds: what its memory grows with."""
        runs = self._keys.get(key)
        return 0 if runs is None else len(runs.runs)

    def retain(self, keep: Callable[[K], bool]) -> None:
        for key in [k for k in self._keys if not keep(k)]:
            del self._keys[key]
