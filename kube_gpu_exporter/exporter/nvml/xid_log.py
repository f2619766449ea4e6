"""The log lines for XID events, limited so that a storm (a failing GPU can raise thousands a
second) does not flood the node's log or cost more than the counting itself.

Within each window, the first `burst` events are logged one by one, as an admin wants to see the
first XID 79 at once; the rest are only counted, and one summary line per window says how many
were left out and which codes were most common.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

WINDOW_SECONDS = 60.0
BURST = 20
# Distinct (GPU, code) pairs kept for the summary; past this, the rest are counted as one total.
MAX_SUMMARY_KEYS = 64


class XidLog:
    def __init__(
        self,
        logger: logging.Logger,
        window_seconds: float = WINDOW_SECONDS,
        burst: int = BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._window = window_seconds
        self._burst = burst
        self._clock = clock
        self._window_start = clock()
        self._logged = 0
        self._held: Counter[tuple[str, int]] = Counter()
        self._held_total = 0

    def event(self, uuid: str, instance: int | None, xid: int) -> None:
        self.flush()
        if self._logged < self._burst:
            self._logged += 1
            where = "" if instance is None else f" (GPU instance {instance})"
            self._log.warning("XID %d on %s%s", xid, uuid, where)
            return
        self._held_total += 1
        key = (uuid, xid)
        if key in self._held or len(self._held) < MAX_SUMMARY_KEYS:
            self._held[key] += 1

    def flush(self) -> None:
        """Ends the window if it is over, logging the summary of what it held back. Called on
        every event and on every idle wake-up of the watcher, so a summary is never late by more
        than one wait."""
        now = self._clock()
        if now - self._window_start < self._window:
            return
        if self._held_total:
            common = ", ".join(
                f"XID {xid} on {uuid} x{count}" for (uuid, xid), count in self._held.most_common(3)
            )
            self._log.warning(
                "%d more XID events in the last %.0fs were not logged one by one (most common: "
                "%s); the counters in DCGM_EXP_XID_ERRORS_TOTAL have them all",
                self._held_total,
                now - self._window_start,
                common,
            )
        self._window_start = now
        self._logged = 0
        self._held.clear()
        self._held_total = 0
