"""When to do work whose result only a scrape reads: just before a scrape is due.

Prometheus scrapes every 15 to 60 s; the exporter sweeps every 1 to 5 s. Some of what a sweep
could read is costly and read by nobody in between: on a real H200 the total energy counter cost
4 ms of kernel CPU per read (more than the other twelve fields of the batch together) and moves
only every 100 ms; the NVLink counters are 36 entries of the batch on an 18-link GPU; a GPM sample
costs 37 µs per GPU or MIG instance plus the metrics' arithmetic; a pod-resources List is a gRPC
round trip. Read every second, the energy counter alone made the exporter cost more CPU than
nvitop-exporter (docs/performance.md).

So such work is done at most once per `interval` and, when scrapes come on a period learnt from
their arrivals (exposition/scrape_schedule.py), only once `lead` seconds or less remain before the
next one. A scraper every 15 s then sees fresh values on each scrape for one read per 15 s, while
one every 5 s gets a read per `interval` at most. Counters and averages lose nothing by it: an
energy total read before each scrape moves on each scrape, and a rate or a GPM average taken
between two such reads covers the whole time between the scrapes rather than the last second.
With nobody scraping on a period, the work is done every max(interval, IDLE_SECONDS); and however
rarely scrapes come, never less often than MAX_AGE_SECONDS.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable

# Seconds until the next scrape is predicted (0: one may come any time), None: nobody scrapes.
NextScrapeIn = Callable[[], float | None]
IDLE_SECONDS = 10.0
MAX_AGE_SECONDS = 60.0


def nobody_scrapes() -> float | None:
    return None


class ScrapeCadence:
    def __init__(
        self,
        interval_seconds: float,
        lead_seconds: float,
        next_scrape_in: NextScrapeIn = nobody_scrapes,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval_seconds
        self._lead = lead_seconds
        self._next_scrape_in = next_scrape_in
        self._clock = clock
        self._max_age = max(MAX_AGE_SECONDS, 6 * interval_seconds)
        self._done_at: dict[Hashable, float] = {}
        self._lock = threading.Lock()

    def due(self, key: Hashable = None) -> bool:
        """Whether the work for `key` (a GPU, or None for one piece of work) is due now."""
        now = self._clock()
        with self._lock:
            last = self._done_at.get(key)
        if last is None:
            return True
        age = now - last
        if age >= self._max_age:
            return True
        if age < self._interval:
            return False
        wait = self._next_scrape_in()
        if wait is None:
            return age >= max(self._interval, IDLE_SECONDS)
        return wait <= self._lead

    def idle_seconds(self, key: Hashable = None) -> float:
        """How long the work for `key` cannot fall due, as things stand: a thread that does
        nothing else sleeps this long rather than asking every tick (each wake-up costs CPU).
        A scraper that turns up meanwhile is met at the next due time instead; MAX_AGE_SECONDS
        still bounds the age."""
        now = self._clock()
        with self._lock:
            last = self._done_at.get(key)
        if last is None:
            return 0.0
        age = now - last
        left_of_max_age = self._max_age - age
        wait = self._next_scrape_in()
        if wait is None:
            until = max(self._interval, IDLE_SECONDS) - age
        else:
            until = max(self._interval - age, wait - self._lead)
        return max(0.0, min(until, left_of_max_age))

    def sleep_seconds(self, tick_seconds: float, key: Hashable = None) -> float:
        """How long a thread ticking every `tick_seconds` for this work may sleep: a tick, or
        until the work is next due when that is later."""
        return max(tick_seconds, self.idle_seconds(key))

    def done(self, key: Hashable = None) -> None:
        """The work for `key` was just done."""
        now = self._clock()
        with self._lock:
            self._done_at[key] = now

    def forget(self, key: Hashable = None, *, everything: bool = False) -> None:
        """Do the work for `key` (for every key, with everything=True) at the next chance."""
        with self._lock:
            if everything:
                self._done_at.clear()
            else:
                self._done_at.pop(key, None)


def helper_cadence(
    tick_seconds: float,
    next_scrape_in: NextScrapeIn,
    clock: Callable[[], float] = time.monotonic,
) -> ScrapeCadence:
    """For work on a thread of its own that ticks every `tick_seconds` alongside the sweep: done
    two ticks ahead of a scrape, so that one sweep at least (sweeps come every tick too) carries
    its result before the scrape, and so at most every two ticks."""
    return ScrapeCadence(2 * tick_seconds, 2 * tick_seconds, next_scrape_in, clock)
