"""Timings on the GPU: each NVML call the exporter makes, timed by calling it directly on GPU 0,
beside the simulator's latency model (a flat cost per call, a blocking PCIe sample window) and the
figures the README quotes from the simulated benchmarks."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.nvml.binding import NVMLError, error_name
from exporter.nvml.device_reader import BATCHED_FIELDS, POWER_AVERAGE, POWER_INSTANT

# The simulator's defaults (exporter/simulator/fleets/default.yaml, `latency:`).
SIM_CALL_US = 100.0
SIM_PCIE_WINDOW_MS = 20.0

# Figures the README's Benchmarks section quotes for the simulated one-GPU node (exporter row):
# a real node with one GPU is the closest thing to compare with.
README_FIGURES: dict[str, float] = {
    "steady_rss_mb": 52.1,
    "cpu_seconds_per_hour_at_5s": 4.8,
    "scrape_p50_ms": 1.50,
    "scrape_p99_ms": 3.19,
    "nvml_calls_per_sweep": 14.2,
}

CallFn = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class TimedCall:
    """One NVML function as the exporter calls it; `per_sweep` is False for the calls made once
    per GPU (identity) or by a helper thread off the sweep's path."""

    label: str
    call: CallFn
    per_sweep: bool = True
    # A blocking call is timed fewer times: each one waits out the driver's sample window.
    repeats: int | None = None
    simulated_us: float = SIM_CALL_US


def _gpm_pair(handle: Any) -> Any:
    """Two filled GPM samples and a metrics request over them, as the exporter's GPM thread
    builds one (exporter/nvml/gpm_sampler.py)."""
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handle, first)
    pynvml.nvmlGpmSampleGet(handle, second)
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = 1
    request.sample1, request.sample2 = first, second
    request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    return request


_BATCH = [*BATCHED_FIELDS, POWER_AVERAGE, POWER_INSTANT]


def timed_calls() -> list[TimedCall]:
    """What a sweep (exporter/nvml/device_reader.py) and its helpers (pcie_sampler.py,
    gpm_sampler.py, poller.py) ask NVML for, with the arguments they pass."""
    pcie_us = SIM_PCIE_WINDOW_MS * 1e3
    return [
        TimedCall("nvmlDeviceGetCount", lambda h: pynvml.nvmlDeviceGetCount()),
        TimedCall("nvmlDeviceGetHandleByIndex", lambda h: pynvml.nvmlDeviceGetHandleByIndex(0)),
        TimedCall(
            "nvmlDeviceGetTemperature",
            lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        ),
        TimedCall("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates),
        TimedCall("nvmlDeviceGetEncoderUtilization", pynvml.nvmlDeviceGetEncoderUtilization),
        TimedCall("nvmlDeviceGetDecoderUtilization", pynvml.nvmlDeviceGetDecoderUtilization),
        TimedCall(
            "nvmlDeviceGetMemoryInfo",
            lambda h: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
        ),
        TimedCall("nvmlDeviceGetPowerManagementLimit", pynvml.nvmlDeviceGetPowerManagementLimit),
        TimedCall("nvmlDeviceGetEnforcedPowerLimit", pynvml.nvmlDeviceGetEnforcedPowerLimit),
        TimedCall(
            "nvmlDeviceGetClockInfo(SM)",
            lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        ),
        TimedCall(
            "nvmlDeviceGetClockInfo(MEM)",
            lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
        ),
        TimedCall(
            "nvmlDeviceGetCurrentClocksEventReasons",
            pynvml.nvmlDeviceGetCurrentClocksEventReasons,
        ),
        TimedCall(
            f"nvmlDeviceGetFieldValues({len(_BATCH)} fields)",
            lambda h: pynvml.nvmlDeviceGetFieldValues(h, _BATCH),
        ),
        TimedCall("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, per_sweep=False),
        TimedCall("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, per_sweep=False),
        TimedCall("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, per_sweep=False),
        TimedCall("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, per_sweep=False),
        TimedCall("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, per_sweep=False),
        TimedCall("nvmlDeviceGetMinorNumber", pynvml.nvmlDeviceGetMinorNumber, per_sweep=False),
        TimedCall(
            "nvmlDeviceGetGridLicensableFeatures_v4",
            pynvml.nvmlDeviceGetGridLicensableFeatures_v4,
            per_sweep=False,
        ),
        TimedCall(
            "nvmlDeviceGetPcieThroughput(TX)",
            lambda h: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
            per_sweep=False,
            repeats=10,
            simulated_us=pcie_us,
        ),
        TimedCall(
            "nvmlDeviceGetPcieThroughput(RX)",
            lambda h: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES),
            per_sweep=False,
            repeats=10,
            simulated_us=pcie_us,
        ),
        TimedCall("nvmlGpmQueryDeviceSupport", pynvml.nvmlGpmQueryDeviceSupport, per_sweep=False),
    ]


@dataclass(frozen=True, slots=True)
class CallTiming:
    label: str
    per_sweep: bool
    calls: int
    median_us: float | None
    p95_us: float | None
    simulated_us: float
    error: str | None  # the NVML error name when the GPU refused the call

    @property
    def ratio(self) -> float | None:
        """Real over simulated: above 1 the simulator is optimistic."""
        if self.median_us is None or not self.simulated_us:
            return None
        return self.median_us / self.simulated_us


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile: an observed value, never an interpolation between two."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]


def summarise(label: str, seconds: Sequence[float]) -> tuple[float, float]:
    """(median, p95) in microseconds."""
    if not seconds:
        raise ValueError(f"{label}: no timings")
    micro = [s * 1e6 for s in seconds]
    return statistics.median(micro), percentile(micro, 0.95)


def time_call(spec: TimedCall, handle: Any, repeats: int) -> CallTiming:
    count = spec.repeats or repeats
    try:
        spec.call(handle)  # the first call may load a symbol or warm a cache: not timed
    except NVMLError as exc:
        return CallTiming(
            spec.label, spec.per_sweep, 0, None, None, spec.simulated_us, error_name(exc)
        )
    seconds: list[float] = []
    for _ in range(count):
        start = time.perf_counter()
        try:
            spec.call(handle)
        except NVMLError as exc:
            # A call that fails now and then is timed on its answers and named for its failure.
            if not seconds:
                return CallTiming(
                    spec.label, spec.per_sweep, 0, None, None, spec.simulated_us, error_name(exc)
                )
            break
        seconds.append(time.perf_counter() - start)
    median, p95 = summarise(spec.label, seconds)
    return CallTiming(spec.label, spec.per_sweep, count, median, p95, spec.simulated_us, None)


def time_gpm(handle: Any, repeats: int) -> list[CallTiming]:
    """nvmlGpmSampleGet and nvmlGpmMetricsGet, which need buffers the other calls do not."""
    try:
        request = _gpm_pair(handle)
    except NVMLError as exc:
        name = error_name(exc)
        return [
            CallTiming(label, False, 0, None, None, SIM_CALL_US, name)
            for label in ("nvmlGpmSampleGet", "nvmlGpmMetricsGet")
        ]
    try:
        sample = request.sample2
        calls = [
            TimedCall("nvmlGpmSampleGet", lambda h: pynvml.nvmlGpmSampleGet(h, sample), False),
            TimedCall("nvmlGpmMetricsGet", lambda h: pynvml.nvmlGpmMetricsGet(request), False),
        ]
        return [time_call(spec, handle, repeats) for spec in calls]
    finally:
        for buffer in (request.sample1, request.sample2):
            with contextlib.suppress(NVMLError):
                pynvml.nvmlGpmSampleFree(buffer)


def time_nvml_calls(repeats: int = 300) -> list[CallTiming]:
    """Every call on GPU 0; pynvml must be initialised."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    timings = [time_call(spec, handle, repeats) for spec in timed_calls()]
    return timings + time_gpm(handle, repeats)


def sweep_estimate(timings: Sequence[CallTiming]) -> tuple[float, float]:
    """(real, simulated) microseconds of one GPU's per-sweep calls made one after another: what
    a one-GPU sweep costs in NVML, and what the simulator's flat model says it costs."""
    ran = [t for t in timings if t.per_sweep and t.median_us is not None]
    return sum(t.median_us or 0.0 for t in ran), sum(t.simulated_us for t in ran)


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    cpu_seconds: float
    wall_seconds: float
    rss_bytes: list[int]
    peak_rss_bytes: int

    @property
    def cpu_seconds_per_hour(self) -> float:
        return self.cpu_seconds / self.wall_seconds * 3600 if self.wall_seconds > 0 else 0.0

    @property
    def steady_rss_mb(self) -> float:
        """Median RSS: the start-up ramp and a scrape's brief peak do not move it."""
        return statistics.median(self.rss_bytes) / 1e6 if self.rss_bytes else 0.0
