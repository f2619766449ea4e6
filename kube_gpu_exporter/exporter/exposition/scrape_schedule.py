"""When the next scrape is due, learned from the scrapes so far.

Rendering and compressing a snapshot is the largest single cost of a sweep, and most snapshots are
never read: Prometheus scrapes every 15 to 60 s while the exporter sweeps every 1 to 5 s. Each
scraper comes at a fixed period, so the store renders a snapshot only when some scraper is due
before the next one replaces it (exposition/store.py). A scraper is told apart by its address;
scrapers behind one address (a proxy, or an HA pair through kube-rbac-proxy) merge into one that
seems to come at the shortest of their gaps, which renders more often, never less.

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
# A scraper not seen for this many of its periods (and at least FORGET_AFTER_SECONDS) is gone.
FORGET_AFTER_PERIODS = 3
FORGET_AFTER_SECONDS = 30.0
# Scrapers tracked at most: more distinct addresses than this mean nobody's period is learnable.
MAX_SCRAPERS = 64


@dataclass(slots=True)
class _Scraper:
    last: float
    gaps: list[float] = field(default_factory=list)

    def period(self) -> float | None:
        return min(self.gaps) if self.gaps else None


class ScrapeSchedule:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._scrapers: dict[str, _Scraper] = {}
        self._lock = threading.Lock()

    def scraped(self, address: str) -> None:
        """A scrape from `address` (the client's IP) arrived now."""
        now = self._clock()
        with self._lock:
            scraper = self._scrapers.get(address)
            if scraper is None:
                if len(self._scrapers) >= MAX_SCRAPERS:
                    self._forget_gone(now)
                self._scrapers[address] = _Scraper(now)
                return
            scraper.gaps.append(now - scraper.last)
            del scraper.gaps[:-GAPS_KEPT]
            scraper.last = now

    def due_within(self, seconds: float) -> bool:
        """Whether a scrape may come in the next `seconds`. False while nobody scrapes: nothing
        is rendered for nobody, and the first scrape renders what it reads."""
        wait = self.next_scrape_in()
        return wait is not None and wait <= seconds

    def next_scrape_in(self) -> float | None:
        """Seconds until the earliest scrape expected (0: one may come any time, a scraper seen
        once or too many to tell apart); None while nobody scrapes."""
        now = self._clock()
        with self._lock:
            self._forget_gone(now)
            if not self._scrapers:
                return None
            if len(self._scrapers) >= MAX_SCRAPERS:
                return 0.0
            soonest = float("inf")
            for scraper in self._scrapers.values():
                period = scraper.period()
                if period is None:
                    return 0.0
                soonest = min(soonest, scraper.last + period - now)
            return max(0.0, soonest)

    def _forget_gone(self, now: float) -> None:
        for address, scraper in list(self._scrapers.items()):
            period = scraper.period() or 0.0
            if now - scraper.last > max(FORGET_AFTER_PERIODS * period, FORGET_AFTER_SECONDS):
                del self._scrapers[address]
