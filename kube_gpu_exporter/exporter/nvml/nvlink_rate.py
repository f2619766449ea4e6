"""NVLink throughput as DCGM's field 449 means it: a rate, not a counter.

DCGM publishes (sum of the link counters now - the sum at its previous read) / the time between
the two reads, timed by the field values' own timestamps (docs/nvml.md, 'NVLink throughput
rate'). This keeps, per GPU, the previous sum and its time, and answers None rather than a
figure nobody could trust: on the first read, when no time has passed, and when the sum went down
(a counter that restarted after a GPU reset or driver reload, or wrapped).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

# 1 TiB/s per counter (one direction of one link), far above any NVLink generation (NVLink 5
# moves 50 GB/s per link and direction): a larger figure can only come from a counter that
# restarted and regrew between two reads.
MAX_KIB_PER_SECOND_PER_COUNTER = float(1 << 30)
MICROSECONDS = 1e6


@dataclass(frozen=True, slots=True)
class NvlinkSample:
    """The summed tx + rx counters of one read of a GPU's links."""

    total_kib: int
    # How many per-link, per-direction counters went into the sum.
    counters: int
    # NVML's timestamp of the newest entry, in microseconds since 1970; 0 when NVML gave none.
    timestamp_us: int
    # time.monotonic() at the read, for when NVML gave no timestamp.
    monotonic_s: float

    @property
    def clock(self) -> tuple[str, float]:
        """(which clock, seconds): NVML's own stamps when it gave them, else ours."""
        if self.timestamp_us > 0:
            return "nvml", self.timestamp_us / MICROSECONDS
        return "monotonic", self.monotonic_s


class NvlinkRate:
    """Previous sample per GPU UUID; safe to call from the sweep's worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._previous: dict[str, NvlinkSample] = {}

    def update(self, uuid: str, sample: NvlinkSample) -> float | None:
        """tx + rx KiB per second since the previous sample of this GPU, or None."""
        with self._lock:
            previous = self._previous.get(uuid)
            rate, keep_previous = _rate(previous, sample)
            if not keep_previous:
                self._previous[uuid] = sample
        return rate

    def forget(self, uuid: str) -> None:
        """The GPU is gone or was reconfigured: its next read starts over."""
        with self._lock:
            self._previous.pop(uuid, None)

    def retain(self, uuids: Iterable[str]) -> None:
        """Drop the GPUs that are no longer enumerated."""
        keep = set(uuids)
        with self._lock:
            for uuid in [u for u in self._previous if u not in keep]:
                del self._previous[uuid]

    def clear(self) -> None:
        """NVML was reloaded: counters may have restarted under every GPU."""
        with self._lock:
            self._previous.clear()


def _rate(previous: NvlinkSample | None, sample: NvlinkSample) -> tuple[float | None, bool]:
    """(rate or None, whether to keep `previous` as the baseline rather than `sample`)."""
    if previous is None or previous.counters != sample.counters:
        return None, False
    (clock, then), (now_clock, now) = previous.clock, sample.clock
    if clock != now_clock:
        return None, False
    elapsed = now - then
    if elapsed == 0:
        # NVML served the same cached reading again; the next one measures from the older read.
        return None, True
    delta = sample.total_kib - previous.total_kib
    if elapsed < 0 or delta < 0:
        return None, False
    rate = delta / elapsed
    if rate > MAX_KIB_PER_SECOND_PER_COUNTER * sample.counters:
        return None, False
    return rate, False
