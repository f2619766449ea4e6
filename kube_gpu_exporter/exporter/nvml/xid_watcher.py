"""XID errors from NVML's event API, in a thread of their own because the wait blocks.

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
from dataclasses import dataclass, replace
from typing import ClassVar

import pynvml

from kube_gpu_exporter.exporter.background import BackgroundThread
from kube_gpu_exporter.exporter.backoff import Backoff
from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.nvml.binding import NVMLError, error_name
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.event_windows import EventWindow
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu
from kube_gpu_exporter.exporter.nvml.source import NvmlSource
from kube_gpu_exporter.exporter.nvml.xid_log import XidLog
from kube_gpu_exporter.exporter.snapshot import CollectorStatus, GpuSnapshot, XidRecord

log = logging.getLogger(__name__)

NO_INSTANCE = 0xFFFFFFFF
# Codes beyond this many distinct values per entity are folded into 999, NVML's "unknown XID".
MAX_DISTINCT_CODES = 256
UNKNOWN_XID = 999
WANTED_EVENTS = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventMigConfigChange


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


class XidWatcher(BackgroundThread):
    thread_name = "xid-watcher"
    collector = "xid"
    # The event wait blocks, so it cannot be run as one round on somebody else's thread.
    needs_thread: ClassVar[bool] = True

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
        super().__init__(clock)
        self._api = source.api
        # `window_ms`: --xid-count-window-size, when DCGM_EXP_XID_ERRORS_COUNT is listed.
        self._book = book if book is not None else XidBook(window_ms, clock.monotonic)
        self._tally = tally
        self._on_mig_change = on_mig_change
        self._wait_ms = source.xid_event_wait_ms
        # How often registering is retried while there are no events to wait on (no GPUs yet, or
        # the driver is being reloaded): short in tests that reload the driver many times.
        self.reregister_delay_seconds = source.xid_reregister_delay_seconds
        self._devices_lock = threading.Lock()
        self._devices: tuple[int, ...] = ()
        self._registered: tuple[int, ...] | None = None
        self._event_set = None
        self._xid_log = XidLog(log, clock=clock.monotonic)
        self.healthy = False

    def watch(self, indexes: Sequence[int]) -> None:
        """Set the GPU indexes to register for; re-registers when the set changes."""
        with self._devices_lock:
            self._devices = tuple(sorted(indexes))

    # As a poller helper

    def track(self, gpus: Sequence[LiveGpu]) -> None:
        self.watch([gpu.index for gpu in gpus])

    def status(self) -> CollectorStatus:
        # Events are not rounds: there is no duration to report.
        return CollectorStatus(self.collector, self.healthy and self.thread_healthy, 0.0)

    def merge(self, gpu: GpuSnapshot) -> GpuSnapshot:
        uuid = gpu.identity.uuid
        board = self._book.gpu_record(uuid)
        instances = self._book.instance_records(uuid)
        if board is None and instances == gpu.instance_xids:
            return gpu  # most GPUs never see an XID: no copy of their snapshot each sweep
        return replace(gpu, xid=gpu.xid if board is None else board, instance_xids=instances)

    def invalidate(self) -> None:
        """The event set dies with the driver; the thread notices and re-registers by itself."""

    def run_once(self) -> None:
        """Nothing to do: events arrive on the watcher's own thread, which always runs."""

    def _run(self) -> None:
        backoff = Backoff(1.0, 30.0)
        while not self._stop.is_set():
            self._round(backoff)
            # Expected NVML failures are handled inside the round; reaching here means the loop
            # itself works, which ends any crash streak.
            self._progressed()
        self._release()

    def _round(self, backoff: Backoff) -> None:
        with self._devices_lock:
            wanted = self._devices
        if wanted != self._registered:
            self._register(wanted)
        if self._event_set is None:
            self._clock.wait(self._stop, self.reregister_delay_seconds)
            return
        try:
            data = self._api.nvmlEventSetWait_v2(self._event_set, self._wait_ms)
        except pynvml.NVMLError_Timeout:
            self._xid_log.flush()
            self.healthy = True
            backoff.succeeded()
            return
        except NVMLError as exc:
            self._tally.record("nvmlEventSetWait_v2", error_name(exc))
            if isinstance(exc, pynvml.NVMLError_Uninitialized):
                # The driver went away with our event set. The poller re-initialises NVML on its
                # own backoff; registering is retried at a fixed short delay until it is back,
                # so a reload does not leave XIDs unwatched for a growing backoff.
                delay = self.reregister_delay_seconds
                log.info("XID event set gone with the driver; re-registering when it is back")
            else:
                delay = backoff.failed()
                log.warning("XID event wait failed: %s; re-registering in %.0fs", exc, delay)
            self.healthy = False
            self._release()
            self._clock.wait(self._stop, delay)
            return
        self.healthy = True
        self._handle(data)

    def _on_crash(self) -> None:
        # Register afresh on restart: the event set may be half set up, or be what failed.
        self.healthy = False
        self._release()
        self._registered = None

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
