"""XID errors from NVML's event API, drained on the sweep thread at the start of every sweep.

There is no pollable "last XID" getter, so every event is tallied here as it arrives. Memory stays
bounded in an XID storm: events are folded into per-code counters immediately, never queued, and
the number of distinct codes kept per entity is capped. With --xid-count-window-size in use, the
events' times are kept too, for the window only and within event_windows.py's bound.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import pynvml

from kube_gpu_exporter.exporter.backoff import Backoff
from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.nvml.binding import NVMLError, error_name
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.event_windows import EventWindow
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu
from kube_gpu_exporter.exporter.nvml.source import NvmlSource
from kube_gpu_exporter.exporter.nvml.xid_log import XidLog
from kube_gpu_exporter.exporter.snapshot import (
    CollectorStatus,
    GpuReadings,
    HelperParts,
    XidRecord,
)

log = logging.getLogger(__name__)

NO_INSTANCE = 0xFFFFFFFF
# Codes beyond this many distinct values per entity are folded into 999, NVML's "unknown XID".
MAX_DISTINCT_CODES = 256
UNKNOWN_XID = 999
WANTED_EVENTS = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventMigConfigChange
# Events taken in one sweep at most: an XID storm (thousands a second) cannot hold the sweep up,
# and what is left waits in NVML's queue for the next one.
MAX_EVENTS_PER_DRAIN = 1024


@dataclass
class _Tally:
    last_xid: int = 0
    sequence: int = 0
    counts: Counter[int] | None = None
    seen: dict[int, float] | None = None

    def add(self, xid: int, sequence: int, at: float = 0.0) -> None:
        if self.counts is None:
            self.counts = Counter()
        # Keep one slot free for the overflow bucket so the total never exceeds the cap.
        room = MAX_DISTINCT_CODES - (0 if UNKNOWN_XID in self.counts else 1)
        if xid not in self.counts and len(self.counts) >= room:
            xid = UNKNOWN_XID
        self.counts[xid] += 1
        if self.seen is None:
            self.seen = {}
        self.seen[xid] = at
        self.last_xid = xid
        self.sequence = sequence

    def freeze(self, window_counts: tuple[tuple[int, int], ...] = ()) -> XidRecord:
        counts = tuple(sorted((self.counts or {}).items()))
        seen = tuple(sorted((self.seen or {}).items()))
        return XidRecord(self.last_xid, self.sequence, counts, window_counts, seen)


_EntityKey = tuple[str, int | None]


class XidBook:
    """XID state per GPU UUID and per (GPU UUID, GPU-instance id); with `window_ms`, also the
    events of the last `window_ms` milliseconds on `clock`."""

    def __init__(
        self, window_ms: int | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lock = threading.Lock()
        self._sequence = 0
        self._clock = clock
        self._entities: dict[_EntityKey, _Tally] = {}
        self._window: EventWindow[_EntityKey] | None = (
            None if window_ms is None else EventWindow(window_ms, clock)
        )

    def record(self, uuid: str, gpu_instance_id: int | None, xid: int) -> None:
        if not 0 <= xid < 1 << 32:
            xid = UNKNOWN_XID
        with self._lock:
            self._sequence += 1
            tally = self._entities.setdefault((uuid, gpu_instance_id), _Tally())
            tally.add(xid, self._sequence, self._clock())
            if self._window is not None:
                # The code as tallied (999 past the cap), so the window's codes are the total's.
                self._window.add((uuid, gpu_instance_id), tally.last_xid)

    def _freeze(self, entity: _EntityKey, tally: _Tally) -> XidRecord:
        window = () if self._window is None else self._window.counts(entity)
        return tally.freeze(window)

    def gpu_record(self, uuid: str) -> XidRecord | None:
        with self._lock:
            tally = self._entities.get((uuid, None))
            return None if tally is None else self._freeze((uuid, None), tally)

    def instance_records(self, uuid: str) -> tuple[tuple[int, XidRecord], ...]:
        with self._lock:
            return tuple(
                sorted(
                    (gi, self._freeze((u, gi), tally))
                    for (u, gi), tally in self._entities.items()
                    if u == uuid and gi is not None
                )
            )


class XidWatcher:
    """Drains NVML's queued XID and MIG-change events at the start of every sweep, on the sweep
    thread, with a wait of 0 ms: NVML keeps the events of a registered set until they are asked
    for, so nothing is missed between sweeps, and a sweep reports every event queued before it
    began, as a waiting thread that handed them to the next sweep did. There is no thread and no
    timed wait: each idle wake-up of a waiting thread cost more CPU than the drain of a whole
    sweep (docs/performance.md, 'Work timed to scrapes, and idle wake-ups')."""

    collector = "xid"
    on_sweep: ClassVar[bool] = True

    def __init__(
        self,
        source: NvmlSource,
        tally: ErrorTally,
        on_mig_change: Callable[[str], None],
        *,
        book: XidBook | None = None,
        window_ms: int | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._api = source.api
        self._clock = clock
        # `window_ms`: --xid-count-window-size, when DCGM_EXP_XID_ERRORS_COUNT is listed.
        self._book = book if book is not None else XidBook(window_ms, clock.monotonic)
        self._tally = tally
        self._on_mig_change = on_mig_change
        # One drain at a time, and never a free under a drain (stop() comes from another thread).
        self._lock = threading.Lock()
        self._devices: tuple[int, ...] = ()
        self._registered: tuple[int, ...] | None = None
        self._event_set = None
        # After a failure, no new event set before this (monotonic) time.
        self._retry_at = 0.0
        self._backoff = Backoff(1.0, 30.0)
        self._xid_log = XidLog(log, clock=clock.monotonic)
        self.healthy = False

    def watch(self, indexes: Sequence[int]) -> None:
        """Register for events on these GPU indexes (again only if the set changed)."""
        with self._lock:
            self._devices = tuple(sorted(indexes))
            self._guarded(self._register_if_changed)

    # As a poller helper

    def start(self) -> None:
        """Nothing runs on a thread of its own: the poller drains the events every sweep."""

    def problem(self) -> str | None:
        return None

    def stop(self, timeout: float = 5.0) -> None:
        if self._lock.acquire(timeout=max(0.0, timeout)):
            try:
                self._release()
            finally:
                self._lock.release()

    def track(self, gpus: Sequence[LiveGpu]) -> None:
        self.watch([gpu.index for gpu in gpus])

    def status(self) -> CollectorStatus:
        # Events are not rounds: there is no duration to report.
        return CollectorStatus(self.collector, self.healthy, 0.0)

    def contribution(self, uuid: str, readings: GpuReadings | None) -> HelperParts:
        board = self._book.gpu_record(uuid)
        instances = self._book.instance_records(uuid)
        if board is None:
            return {"instance_xids": instances} if instances else {}  # most GPUs see no XID
        return {"xid": board, "instance_xids": instances}

    def invalidate(self) -> None:
        """The event set died with the driver: dropped, not freed; registered again once the
        poller tracks the GPUs of the new driver."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        self._event_set = None
        self._registered = None
        self.healthy = False

    def run_once(self) -> None:
        """Take every event NVML has queued since the last drain (at most MAX_EVENTS_PER_DRAIN;
        the rest wait for the next sweep). Never raises: the sweep goes on without XIDs."""
        with self._lock:
            self._guarded(self._drain)

    def _guarded(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception:
            # Whatever broke may be the event set itself: a fresh one after the backoff.
            log.exception("XID events: unexpected error; registering afresh")
            self._start_again_later()

    def _register_if_changed(self) -> None:
        # After a failure, no new event set until the backoff has passed.
        if self._devices != self._registered and self._clock.monotonic() >= self._retry_at:
            self._register(self._devices)

    def _drain(self) -> None:
        self._register_if_changed()
        if self._event_set is None:
            return
        for _ in range(MAX_EVENTS_PER_DRAIN):
            try:
                data = self._api.nvmlEventSetWait_v2(self._event_set, 0)
            except pynvml.NVMLError_Timeout:
                break  # nothing more queued
            except NVMLError as exc:
                self._failed(exc)
                return
            self._handle(data)
        self._xid_log.flush()
        self.healthy = True
        self._backoff.succeeded()

    def _failed(self, exc: NVMLError) -> None:
        self._tally.record("nvmlEventSetWait_v2", error_name(exc))
        if isinstance(exc, pynvml.NVMLError_Uninitialized):
            # The driver went away with our event set: the poller re-initialises NVML on its own
            # backoff and tracks the GPUs again, and the next drain registers then.
            log.info("XID event set gone with the driver; re-registering when it is back")
            self._drop()
            return
        delay = self._start_again_later()
        log.warning("XID event wait failed: %s; re-registering in %.0fs", exc, delay)

    def _start_again_later(self) -> float:
        """Drop the event set and register a fresh one after the backoff; the delay."""
        self.healthy = False
        self._release()
        delay = self._backoff.failed()
        self._retry_at = self._clock.monotonic() + delay
        return delay

    def _handle(self, data: pynvml.c_nvmlEventData_t) -> None:
        try:
            uuid = str(self._api.nvmlDeviceGetUUID(data.device))
        except NVMLError as exc:
            self._tally.record("nvmlDeviceGetUUID", error_name(exc))
            return
        if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            gi = data.gpuInstanceId
            instance = None if gi == NO_INSTANCE else int(gi)
            self._book.record(uuid, instance, int(data.eventData))
            self._xid_log.event(uuid, instance, int(data.eventData))
        if data.eventType & pynvml.nvmlEventMigConfigChange:
            self._on_mig_change(uuid)

    def _register(self, indexes: tuple[int, ...]) -> None:
        self._release()
        if not indexes:
            self._registered = indexes
            return
        try:
            event_set = self._api.nvmlEventSetCreate()
        except NVMLError as exc:
            self._tally.record("nvmlEventSetCreate", error_name(exc))
            self._start_again_later()
            return
        registered = 0
        for index in indexes:
            try:
                handle = self._api.nvmlDeviceGetHandleByIndex(index)
                mask = WANTED_EVENTS & self._api.nvmlDeviceGetSupportedEventTypes(handle)
                if mask:
                    self._api.nvmlDeviceRegisterEvents(handle, mask, event_set)
                    registered += 1
            except NVMLError as exc:
                # NOT_SUPPORTED here means nothing was registered for this GPU; the set still works.
                self._tally.record("nvmlDeviceRegisterEvents", error_name(exc))
                log.info("GPU %d: XID events unavailable: %s", index, exc)
        self._event_set = event_set
        self._registered = indexes
        self.healthy = registered > 0
        log.debug("XID events registered on %d of %d GPUs", registered, len(indexes))

    def _release(self) -> None:
        if self._event_set is not None:
            try:
                self._api.nvmlEventSetFree(self._event_set)
            except NVMLError as exc:
                self._tally.record("nvmlEventSetFree", error_name(exc))
            self._event_set = None
            self._registered = None
