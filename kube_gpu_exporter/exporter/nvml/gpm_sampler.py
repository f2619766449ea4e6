"""Profiling metrics from NVML GPU Performance Monitoring (GPM, Hopper and newer), per GPU and per
MIG instance, sampled in their own thread.

GPM needs no DCGM, no SYS_ADMIN and does not fight Nsight or CUPTI. Each entity (a whole GPU, or
one GPU instance of a MIG GPU) owns two sample buffers, allocated once: every interval the older
buffer is refilled, and the metrics are what happened between the two. Buffers are freed when
their entity goes away (GPU lost, MIG instance removed) and on stop, so nothing leaks however long
the exporter runs. A device that does not support GPM is asked once and then left alone.

When NVML goes (driver unloaded or reloaded), `invalidate` swaps in a fresh driver state under a
lock that no NVML call is ever made under, so a round stuck in a GPM call cannot hold up the
poller's reload path; the stuck round stops at its next entity and its results are dropped.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.fields.model import Gpm
from kube_gpu_exporter.exporter.fields.table import PROFILING_FIELDS
from kube_gpu_exporter.exporter.nvml.binding import (
    GPU_GONE,
    PERMANENTLY_UNAVAILABLE,
    NVMLError,
    error_name,
)
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu, PeriodicHelper
from kube_gpu_exporter.exporter.nvml.rejected_readings import NOT_FINITE, RejectedReadings
from kube_gpu_exporter.exporter.scrape_cadence import ScrapeCadence
from kube_gpu_exporter.exporter.snapshot import (
    GpuReadings,
    HelperParts,
    ProfilingReadings,
)
from kube_gpu_exporter.exporter.struct_views import plain_type

log = logging.getLogger(__name__)

# (GPM metric id, factor from GPM's unit to dcgm-exporter's, DCGM field name: the key of its
# value in ProfilingReadings), from the field table's GPM rows (docs/nvml.md, 'GPM').
METRICS: tuple[tuple[int, float, str], ...] = tuple(
    (row.source.metric_id, row.source.factor, row.name)
    for row in PROFILING_FIELDS
    if isinstance(row.source, Gpm)
)

# A GPU to sample: the whole board, or each of its MIG GPU instances.
GpmTarget = LiveGpu

# (GPU uuid, GPU-instance id or None for the whole GPU)
EntityKey = tuple[str, int | None]
Latest = tuple[ProfilingReadings | None, tuple[tuple[int, ProfilingReadings], ...]]


@dataclass
class _Buffers:
    samples: list[Any]
    turn: int = 0
    filled: int = 0


@dataclass
class _Round:
    readings: dict[EntityKey, ProfilingReadings] = field(default_factory=dict)
    ok: bool = True


@dataclass
class _DriverState:
    """What rounds keep about the loaded driver from one to the next. Replaced whole when NVML
    goes, never cleared in place: a round still running then keeps the old one to itself, and
    the buffers in it are never freed (they went with the library)."""

    buffers: dict[EntityKey, _Buffers] = field(default_factory=dict)
    # GPU uuid -> whether it supports GPM; asked once per driver.
    supported: dict[str, bool] = field(default_factory=dict)


class _Superseded(Exception):
    """NVML went during the round: its buffers are dangling pointers into a library that is gone
    (or loaded anew), so the round must not pass them to NVML again."""


def _metrics_request() -> Any:
    """The one metrics request a sampler reuses, as a plain ctypes structure with
    `c_nvmlGpmMetricsGet_t`'s layout (struct_views): NVML takes it by reference all the same, and
    its fields read at C speed. NVML fills in results only, so the metric ids are set once."""
    request = plain_type(pynvml.c_nvmlGpmMetricsGet_t)()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(METRICS)
    for metric, (metric_id, *_rest) in zip(request.metrics, METRICS, strict=False):
        metric.metricId = metric_id
    return request


class GpmSampler(PeriodicHelper):
    thread_name = "gpm-sampler"
    collector = "gpm"

    def __init__(
        self,
        nvml: GuardedNvml,
        interval_seconds: float,
        cadence: ScrapeCadence | None = None,
        rejected: RejectedReadings | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(interval_seconds, clock)
        self._nvml = nvml
        self._rejected = rejected or RejectedReadings()
        # None: a sample every interval. Else a sample only when it says, just before a scrape:
        # the metrics are then averages over the time between scrapes (scrape_cadence.py).
        self._cadence = cadence
        self._targets: tuple[GpmTarget, ...] = ()
        # One round at a time (the thread's, or run_once's): they share the metrics request and
        # the buffers. invalidate() never takes it: a round stuck in a GPM call must not hold up
        # the driver-reload path.
        self._round_lock = threading.Lock()
        # Held only to swap the driver state or to publish a round's results, never over an
        # NVML call.
        self._publish_lock = threading.Lock()
        self._driver = _DriverState()
        # Swapped whole, never mutated: the sweep's workers read it without a lock.
        self._latest: dict[EntityKey, ProfilingReadings] = {}
        self._request = _metrics_request()

    # What the poller sees

    def sample(self, targets: Sequence[GpmTarget]) -> None:
        self._targets = tuple(targets)

    def latest(self, uuid: str) -> Latest:
        latest = self._latest
        board = latest.get((uuid, None))
        instances = tuple(
            sorted((gi, r) for (u, gi), r in latest.items() if u == uuid and gi is not None)
        )
        return board, instances

    def track(self, gpus: Sequence[LiveGpu]) -> None:
        self.sample(gpus)
        # A GPU new to us gets its first sample now, so its first metrics come one interval later.
        super().track(gpus)

    def wake(self) -> None:
        """A round now, and a sample in it whatever the cadence says: a GPU is new to us."""
        if self._cadence is not None:
            self._cadence.forget()
        super().wake()

    def contribution(self, uuid: str, readings: GpuReadings | None) -> HelperParts:
        board, instances = self.latest(uuid)
        if board is None and not instances:
            return {}  # no GPM on this GPU
        return {"profiling": board, "instance_profiling": instances}

    @property
    def buffers_allocated(self) -> int:
        # A copy of the values: a round in progress may add buffers meanwhile.
        return sum(len(b.samples) for b in tuple(self._driver.buffers.values()))

    # Lifecycle

    def stop(self, timeout: float = 5.0) -> None:
        super().stop(timeout)
        # A round stuck in NVML (the thread's, or a run_once caller's) keeps its buffers: freeing
        # them under a call still using them could crash the library.
        if self.alive or not self._round_lock.acquire(timeout=timeout):
            return
        try:
            driver = self._driver
            self._free(driver, list(driver.buffers))
        finally:
            self._round_lock.release()

    def invalidate(self) -> None:
        """NVML was shut down underneath us: every buffer is gone with it, nothing to free. Never
        waits for a round in progress: that round stops at its next entity, and what it read is
        dropped."""
        with self._publish_lock:
            self._driver = _DriverState()
            self._latest = {}
            # No round has read the new driver yet.
            self.last_success = False
        super().invalidate()

    # One round

    def _next_round_in(self) -> float:
        # Timed to scrapes, the thread sleeps until the next sample is due, not a tick at a time.
        tick = self._interval - self.last_duration_seconds
        return tick if self._cadence is None else self._cadence.sleep_seconds(tick)

    def sample_once(self) -> None:
        if self._cadence is not None:
            if not self._cadence.due():
                return
            self._cadence.done()
        with self._round_lock:
            driver = self._driver
            try:
                round_ = self._sample_round(driver)
            except _Superseded:
                return
            with self._publish_lock:
                if driver is not self._driver:
                    return  # NVML went at the very end: what it read is of a library now gone
                self._latest = round_.readings
                self.last_success = round_.ok

    def _sample_round(self, driver: _DriverState) -> _Round:
        round_ = _Round()
        wanted: set[EntityKey] = set()
        for target in self._targets:
            try:
                wanted |= self._sample_device(target, round_, driver)
            except GPU_GONE:
                round_.ok = False
            except NVMLError as exc:
                log.debug("GPM sampling of GPU %d failed: %s", target.index, exc)
                round_.ok = False
        self._check_current(driver)
        self._free(driver, [key for key in driver.buffers if key not in wanted])
        return round_

    def _check_current(self, driver: _DriverState) -> None:
        """Raise _Superseded when NVML went since the round began. Checked before each use of a
        buffer, which narrows the time a stale buffer could reach the new library to one check's
        distance from the call, without a lock that a hung call would hold."""
        if driver is not self._driver:
            raise _Superseded

    def _sample_device(
        self, target: GpmTarget, round_: _Round, driver: _DriverState
    ) -> set[EntityKey]:
        handle = self._nvml.api.nvmlDeviceGetHandleByIndex(target.index)
        if not self._is_supported(target.uuid, handle, driver):
            return set()
        keys: list[EntityKey] = (
            [(target.uuid, None)]
            if target.gpu_instance_ids is None
            else [(target.uuid, gi) for gi in target.gpu_instance_ids]
        )
        for key in keys:
            try:
                readings = self._sample_entity(key, handle, driver)
            except PERMANENTLY_UNAVAILABLE as exc:
                log.info("%s: GPM sampling is %s; not asking again", target.uuid, error_name(exc))
                driver.supported[target.uuid] = False
                return set()
            except pynvml.NVMLError_NotFound:
                continue  # the MIG instance went away between the sweep and this round
            if readings is not None:
                round_.readings[key] = readings
        return set(keys)

    def _is_supported(self, uuid: str, handle: Any, driver: _DriverState) -> bool:
        known = driver.supported.get(uuid)
        if known is not None:
            return known
        support = self._nvml.call(uuid, "gpm_support", "nvmlGpmQueryDeviceSupport", handle)
        if support is None:
            # NOT_SUPPORTED or an old driver is remembered by the guard; anything else: next round.
            if self._nvml.is_unavailable(uuid, "gpm_support:0"):
                driver.supported[uuid] = False
            return False
        driver.supported[uuid] = bool(support.isSupportedDevice)
        if not support.isSupportedDevice:
            log.info("%s: no GPM on this GPU; profiling metrics skipped", uuid)
        return driver.supported[uuid]

    def _sample_entity(
        self, key: EntityKey, handle: Any, driver: _DriverState
    ) -> ProfilingReadings | None:
        self._check_current(driver)
        buffers = driver.buffers.get(key)
        if buffers is None:
            buffers = _Buffers([self._nvml.raw("nvmlGpmSampleAlloc") for _ in range(2)])
            driver.buffers[key] = buffers
        sample = buffers.samples[buffers.turn]
        uuid, gi = key
        if gi is None:
            self._nvml.raw("nvmlGpmSampleGet", handle, sample)
        else:
            self._nvml.raw("nvmlGpmMigSampleGet", handle, gi, sample)
        buffers.filled = min(2, buffers.filled + 1)
        older = buffers.samples[1 - buffers.turn]
        buffers.turn = 1 - buffers.turn
        if buffers.filled < 2:
            return None
        self._check_current(driver)  # the sample call may have been the one that hung
        return self._metrics(uuid, older, sample)

    def _metrics(self, uuid: str, older: Any, newer: Any) -> ProfilingReadings:
        request = self._request
        request.sample1, request.sample2 = older, newer
        self._nvml.raw("nvmlGpmMetricsGet", request)
        values: dict[str, float] = {}
        rows = zip(request.metrics, METRICS, strict=False)
        for metric, (_metric_id, factor, field_name) in rows:
            if metric.nvmlReturn != pynvml.NVML_SUCCESS:
                continue
            value = metric.value * factor
            if not math.isfinite(value):
                # An infinite or NaN average would poison every sum it enters (the per-pod
                # energy split): no reading this round, and the next finite one stands again.
                self._rejected.record(uuid, field_name, NOT_FINITE, value)
                continue
            # GPM differences two samples; a counter that wrapped reads below zero.
            values[field_name] = max(0.0, value)
        return ProfilingReadings(MappingProxyType(values))

    def _free(self, driver: _DriverState, keys: list[EntityKey]) -> None:
        for key in keys:
            buffers = driver.buffers.pop(key, None)
            for sample in buffers.samples if buffers else ():
                with contextlib.suppress(NVMLError):
                    self._nvml.api.nvmlGpmSampleFree(sample)
