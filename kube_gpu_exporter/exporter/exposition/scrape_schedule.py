"""When the next scrape is due, learned from the scrapes so far.

Rendering and compressing a snapshot is the largest single cost of a sweep, and most snapshots are
never read: Prometheus scrapes every 15 to 60 s while the exporter sweeps every 1 to 5 s. Each
scraper comes at a fixed period, so the store renders a snapshot only when some scraper is due
before the next one replaces it (exposition/store.py). Scrapers are learnt twice over:

- by connection (address and port): a Prometheus scrape loop keeps its connection open between
  scrapes, so each loop of an HA pair is told apart even behind one address. Rendering follows
  every connection that has come back on a period; the work timed to scrapes
  (scrape_cadence.py) follows one of them, the pacer, rather than every scrape of every server;
- by address (the client's IP), until some connection has come back twice (a scraper that
  closes its connection after each scrape never does). Scrapers behind one address (a proxy,
  or both servers of an HA pair on one host) then merge into one that seems to come at the
  shortest of their gaps, which renders more often, never less. That is why connections come
  first: two servers on one host 3.8 s apart in a 15 s interval seemed a scraper every 3.8 s,
  overdue for the 7.4 s until the next real scrape, and at a 1 s poll every snapshot of those
  7.4 s was rendered for nobody (54 renders in 90 s for 12 scrapes).

Only periodic scrapers teach the schedule: the server counts a request as a scrape when it names
its scrape timeout, as Prometheus and the agents built on its scrape code do (server.py). A person
running curl by hand is served from the latest sweep and changes nothing about what follows.

Predictions only save work: a scrape that finds an unrendered snapshot renders it on the spot,
as the first scrape after start does, and as every scrape would if nobody scraped on a period.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# Gaps remembered per scraper; the shortest predicts the next.
GAPS_KEPT = 4
# A scraper not seen for this many of its periods is gone.
FORGET_AFTER_PERIODS = 2
# A scraper seen once has no period yet: it is kept this long, longer than the longest scrape
# interval in common use (2 minutes), so that a slow one is learnt at its second scrape.
UNLEARNT_FORGET_SECONDS = 130.0
# Scrapers tracked at most: more distinct addresses than this mean nobody's period is learnable.
MAX_SCRAPERS = 64
# Scrapers whose periods are within this factor of the shortest keep the same pace: the first
# of them seen paces the work timed to scrapes.
SAME_PACE = 1.1


@dataclass(slots=True)
class _Scraper:
    last: float
    gaps: list[float] = field(default_factory=list)

    def period(self) -> float | None:
        return min(self.gaps) if self.gaps else None

    def next_in(self, now: float) -> float | None:
        period = self.period()
        return None if period is None else max(0.0, self.last + period - now)

    def gone(self, now: float) -> bool:
        period = self.period()
        limit = UNLEARNT_FORGET_SECONDS if period is None else FORGET_AFTER_PERIODS * period
        return now - self.last > limit


class _Arrivals:
    """Scrapers by key, in the order they were first seen."""

    def __init__(self) -> None:
        self.scrapers: dict[str, _Scraper] = {}

    def arrived(self, key: str, now: float) -> None:
        scraper = self.scrapers.get(key)
        if scraper is None:
            if len(self.scrapers) >= MAX_SCRAPERS:
                self.forget_gone(now)
            self.scrapers[key] = _Scraper(now)
            return
        scraper.gaps.append(now - scraper.last)
        del scraper.gaps[:-GAPS_KEPT]
        scraper.last = now

    def forget_gone(self, now: float) -> None:
        for key in [k for k, s in self.scrapers.items() if s.gone(now)]:
            del self.scrapers[key]

    def soonest_in(self, now: float) -> float | None:
        """Seconds until the earliest scrape expected: 0 while any scraper has no period yet or
        there are too many to tell apart; None while there is none."""
        if not self.scrapers:
            return None
        if len(self.scrapers) >= MAX_SCRAPERS:
            return 0.0
        waits = [s.next_in(now) for s in self.scrapers.values()]
        return 0.0 if None in waits else min(w for w in waits if w is not None)

    def learnt_soonest_in(self, now: float) -> float | None:
        """Seconds until the earliest scrape of the scrapers with a period, None while none has
        one or there are too many to tell apart. Scrapers seen once are left out: the scrape
        that would teach one its period renders what it reads, as any unpredicted scrape does."""
        if len(self.scrapers) >= MAX_SCRAPERS:
            return None
        waits = [w for w in (s.next_in(now) for s in self.scrapers.values()) if w is not None]
        return min(waits) if waits else None

    def pacer_in(self, now: float) -> float | None:
        """Seconds until the pacer's next scrape, None while no scraper has a period."""
        learnt = [s for s in self.scrapers.values() if s.period() is not None]
        if not learnt or len(self.scrapers) >= MAX_SCRAPERS:
            return None
        shortest = min(s.period() or 0.0 for s in learnt)
        pacer = next(s for s in learnt if (s.period() or 0.0) <= shortest * SAME_PACE)
        return pacer.next_in(now)


class ScrapeSchedule:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._addresses = _Arrivals()
        self._connections = _Arrivals()
        self._lock = threading.Lock()

    def scraped(self, address: str, connection: str | None = None) -> None:
        """A periodic scrape from `address` (the client's IP) arrived now, over `connection` (a
        key for the client's end of it, such as its address and port; None if unknown)."""
        now = self._clock()
        with self._lock:
            self._addresses.arrived(address, now)
            if connection is not None:
                self._connections.arrived(connection, now)

    def due_within(self, seconds: float) -> bool:
        """Whether a scrape may come in the next `seconds`. False while nobody scrapes: nothing
        is rendered for nobody, and the first scrape renders what it reads."""
        wait = self.next_scrape_in()
        return wait is not None and wait <= seconds

    def next_scrape_in(self) -> float | None:
        """Seconds until the earliest scrape expected: of the connections that have a period,
        else of the addresses (0: one may come any time, a scraper seen once or too many to
        tell apart); None while nobody scrapes."""
        now = self._clock()
        with self._lock:
            self._forget_gone(now)
            learnt = self._connections.learnt_soonest_in(now)
            return self._addresses.soonest_in(now) if learnt is None else learnt

    def paced_scrape_in(self) -> float | None:
        """Like next_scrape_in, for work wanted once per scrape interval however many scrapers
        there are: seconds until the pacer's next scrape, or next_scrape_in's answer while no
        connection has a period."""
        now = self._clock()
        with self._lock:
            self._forget_gone(now)
            paced = self._connections.pacer_in(now)
            return self._addresses.soonest_in(now) if paced is None else paced

    def _forget_gone(self, now: float) -> None:
        self._addresses.forget_gone(now)
        self._connections.forget_gone(now)
