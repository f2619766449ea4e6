"""Per GPU, how many sweeps saw each clock event reason active: our DCGM_EXP_CLOCK_EVENTS_TOTAL.

dcgm-exporter 4.8.3 counts, per reason bit, the reported samples whose reason mask has that bit
(docs/dcgm-exporter-compatibility.md, 'Clock events'); a sweep is our sample. Counts live as long
as the exporter, so a sweep in which NVML failed adds nothing and takes nothing away; only a GPU
that NVML no longer enumerates loses its counts. Every reason is reported, zeros included, from
the first mask read, so that rate() has a starting point before the reason first fires.

With a window (DCGM_EXP_CLOCK_EVENTS_COUNT listed), each sweep's mask is also kept for that long
(kube_gpu_exporter/exporter/nvml/event_windows.py) and counted per reason the same way, over the
window only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from kube_gpu_exporter.exporter.clock_events import CLOCK_EVENTS
from kube_gpu_exporter.exporter.nvml.event_windows import EventWindow

Counts = tuple[tuple[str, int], ...]


class ClockEventCounts:
    def __init__(
        self, window_ms: int | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lock = threading.Lock()
        # UUID -> count per CLOCK_EVENTS entry, in that table's order.
        self._counts: dict[str, list[int]] = {}
        # UUID -> recent sweeps' masks; None (nothing kept) unless a window is configured.
        self._window: EventWindow[str] | None = (
            None if window_ms is None else EventWindow(window_ms, clock)
        )

    def record(self, uuid: str, reasons: int | None) -> Counts:
        """Add one sweep's reason mask (None: NVML gave none this sweep) and return the counts."""
        with self._lock:
            counts = self._counts.get(uuid)
            if reasons is not None:
                if counts is None:
                    counts = self._counts[uuid] = [0] * len(CLOCK_EVENTS)
                for position, (bit, _name) in enumerate(CLOCK_EVENTS):
                    if reasons & bit:
                        counts[position] += 1
                # A mask with no reason adds to no count: it need not take room in the window.
                if self._window is not None and reasons:
                    self._window.add(uuid, reasons)
            return _named(counts)

    def window_counts(self, uuid: str) -> Counts:
        """Per reason active in the window ending now, the sweeps it was active in; () when none
        was, or when no window is configured."""
        if self._window is None:
            return ()
        with self._lock:
            masks = self._window.counts(uuid)
        totals = [(name, sum(n for mask, n in masks if mask & bit)) for bit, name in CLOCK_EVENTS]
        return tuple((name, n) for name, n in totals if n)

    def counts(self, uuid: str) -> Counts:
        """The counts so far, without a new sweep (the GPU did not answer this time)."""
        with self._lock:
            return _named(self._counts.get(uuid))

    def retain(self, uuids: Iterable[str]) -> None:
        """Forget the GPUs that are no longer enumerated."""
        keep = set(uuids)
        with self._lock:
            for uuid in [u for u in self._counts if u not in keep]:
                del self._counts[uuid]
            if self._window is not None:
                self._window.retain(keep.__contains__)


_NAMES = tuple(name for _bit, name in CLOCK_EVENTS)


def _named(counts: list[int] | None) -> Counts:
    if counts is None:
        return ()
    return tuple(zip(_NAMES, counts, strict=True))
