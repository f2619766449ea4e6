"""Timings on the GPU: each NVML call the exporter makes, and each field of its field-value batch
read alone, timed by calling them directly on GPU 0 beside the simulator's cost model
(kube_gpu_exporter/exporter/simulator/call_costs.py) and the figures docs/benchmarks.md quotes from
the simulated benchmarks.

Every timed loop also reads the calling thread's user and system CPU before and after, so a call
that costs wall time only by waiting (the PCIe throughput window) is told apart from one that
keeps a CPU busy in the kernel (the total energy counter).
"""

from __future__ import annotations

import contextlib
import math
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from benchmarks.real_gpu.independent import ERROR_NAMES
from kube_gpu_exporter.exporter.nvml import device_reader
from kube_gpu_exporter.exporter.nvml.binding import NVMLError, error_name
from kube_gpu_exporter.exporter.nvml.device_reader import (
    BATCHED_FIELDS,
    NVLINK_FIELDS,
    POWER_AVERAGE,
    POWER_INSTANT,
)
from kube_gpu_exporter.exporter.simulator.call_costs import MEASURED

# The simulator's PCIe sample window (kube_gpu_exporter/exporter/simulator/fleets/default.yaml,
# `latency:`): the cost model leaves that call to the window, which the fake waits out per
# direction.
SIM_PCIE_WINDOW_MS = 20.0
# A field read alone above this is named in the report: the H200's costly ones took 150 µs (PCIe
# replay counter) and 4 ms (total energy), all the others 3-10 µs.
SLOW_FIELD_US = 100.0
NVLINK_LINK_COUNT = getattr(pynvml, "NVML_FI_DEV_NVLINK_LINK_COUNT", 91)

# Figures docs/benchmarks.md ('Exporter side') quotes for the simulated one-GPU node (exporter row):
# a real node with one GPU is the closest thing to compare with.
README_FIGURES: dict[str, float] = {
    "steady_rss_mb": 52.1,
    "cpu_seconds_per_hour_at_5s": 4.8,
    "scrape_p50_ms": 1.50,
    "scrape_p99_ms": 3.19,
    "nvml_calls_per_sweep": 14.2,
}

CallFn = Callable[[Any], Any]
FieldRequest = int | tuple[int, int]

_BATCH: list[FieldRequest] = [*BATCHED_FIELDS, POWER_AVERAGE, POWER_INSTANT]
# The fields an exporter that reads its slow ones (costly or rarely changing) only now and then
# leaves out of most sweeps; empty for one that reads every field every sweep.
_SLOW: frozenset[int] = frozenset(getattr(device_reader, "SLOW_FIELDS", {}))
_FAST_BATCH: list[FieldRequest] = [f for f in _BATCH if f not in _SLOW]
FIELD_BATCH_FUNCTION = "nvmlDeviceGetFieldValues"
PCIE_FUNCTION = "nvmlDeviceGetPcieThroughput"


def function_of(label: str) -> str:
    """ "nvmlDeviceGetClockInfo(SM)" -> "nvmlDeviceGetClockInfo"."""
    return label.split("(", 1)[0]


def _batch_label(batch: Sequence[FieldRequest]) -> str:
    slow = "" if not _SLOW else ", slow ones too" if batch == _BATCH else ", no slow ones"
    return f"{FIELD_BATCH_FUNCTION}({len(batch)} fields{slow})"


def modelled_call_us(label: str) -> float:
    """What the simulator charges for one call of `label`, wall time, in µs."""
    function = function_of(label)
    if function == PCIE_FUNCTION:
        return SIM_PCIE_WINDOW_MS * 1e3
    if label == _batch_label(_FAST_BATCH):
        return MEASURED.fields(_FAST_BATCH).wall_us
    if function == FIELD_BATCH_FUNCTION:
        return MEASURED.fields(_BATCH).wall_us
    return MEASURED.call(function).wall_us


def cost_model_description() -> str:
    return MEASURED.describe()


@dataclass(frozen=True, slots=True)
class TimedCall:
    """One NVML function as the exporter calls it; `per_sweep` is False for the calls made once
    per GPU (identity), by a helper thread off the sweep's path, or only for reference."""

    label: str
    call: CallFn
    per_sweep: bool = True
    # A blocking call is timed fewer times: each one waits out the driver's sample window.
    repeats: int | None = None


def gpm_pair(nvml: Any, handle: Any) -> Any:
    """Two filled GPM samples and a metrics request over them, as the exporter's GPM thread
    builds one (kube_gpu_exporter/exporter/nvml/gpm_sampler.py)."""
    first, second = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
    nvml.nvmlGpmSampleGet(handle, first)
    nvml.nvmlGpmSampleGet(handle, second)
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = 1
    request.sample1, request.sample2 = first, second
    request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    return request


def timed_calls(nvml: Any) -> list[TimedCall]:
    """What a sweep (kube_gpu_exporter/exporter/nvml/device_reader.py) and its helpers
    (pcie_sampler.py, gpm_sampler.py, poller.py) ask NVML for, with the arguments they pass; `nvml`
    is the `pynvml` module or the simulator's api object."""
    return [
        TimedCall("nvmlDeviceGetCount", lambda h: nvml.nvmlDeviceGetCount()),
        TimedCall("nvmlDeviceGetHandleByIndex", lambda h: nvml.nvmlDeviceGetHandleByIndex(0)),
        TimedCall(
            "nvmlDeviceGetTemperature",
            lambda h: nvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        ),
        TimedCall("nvmlDeviceGetUtilizationRates", nvml.nvmlDeviceGetUtilizationRates),
        TimedCall("nvmlDeviceGetEncoderUtilization", nvml.nvmlDeviceGetEncoderUtilization),
        TimedCall("nvmlDeviceGetDecoderUtilization", nvml.nvmlDeviceGetDecoderUtilization),
        TimedCall(
            "nvmlDeviceGetMemoryInfo",
            lambda h: nvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
        ),
        TimedCall("nvmlDeviceGetPowerManagementLimit", nvml.nvmlDeviceGetPowerManagementLimit),
        TimedCall("nvmlDeviceGetEnforcedPowerLimit", nvml.nvmlDeviceGetEnforcedPowerLimit),
        TimedCall(
            "nvmlDeviceGetClockInfo(SM)",
            lambda h: nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        ),
        TimedCall(
            "nvmlDeviceGetClockInfo(MEM)",
            lambda h: nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
        ),
        TimedCall(
            "nvmlDeviceGetCurrentClocksEventReasons",
            nvml.nvmlDeviceGetCurrentClocksEventReasons,
        ),
        *_batches(nvml),
        TimedCall("nvmlDeviceGetPowerUsage", nvml.nvmlDeviceGetPowerUsage, per_sweep=False),
        # Read once with the identity: the ceiling a power reading is checked against.
        TimedCall(
            "nvmlDeviceGetPowerManagementLimitConstraints",
            nvml.nvmlDeviceGetPowerManagementLimitConstraints,
            per_sweep=False,
        ),
        # The exporter reads the counter as a field; the getter is timed for the cost table,
        # so the simulator can charge a caller that uses it instead.
        TimedCall(
            "nvmlDeviceGetTotalEnergyConsumption",
            nvml.nvmlDeviceGetTotalEnergyConsumption,
            per_sweep=False,
        ),
        TimedCall("nvmlDeviceGetUUID", nvml.nvmlDeviceGetUUID, per_sweep=False),
        TimedCall("nvmlDeviceGetName", nvml.nvmlDeviceGetName, per_sweep=False),
        TimedCall("nvmlDeviceGetPciInfo", nvml.nvmlDeviceGetPciInfo, per_sweep=False),
        TimedCall("nvmlDeviceGetMigMode", nvml.nvmlDeviceGetMigMode, per_sweep=False),
        TimedCall("nvmlDeviceGetMinorNumber", nvml.nvmlDeviceGetMinorNumber, per_sweep=False),
        TimedCall(
            "nvmlDeviceGetGridLicensableFeatures_v4",
            nvml.nvmlDeviceGetGridLicensableFeatures_v4,
            per_sweep=False,
        ),
        TimedCall(
            f"{PCIE_FUNCTION}(TX)",
            lambda h: nvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
            per_sweep=False,
            repeats=10,
        ),
        TimedCall(
            f"{PCIE_FUNCTION}(RX)",
            lambda h: nvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES),
            per_sweep=False,
            repeats=10,
        ),
        TimedCall("nvmlGpmQueryDeviceSupport", nvml.nvmlGpmQueryDeviceSupport, per_sweep=False),
        # With the slow fields, on a board a fabric manager registers (NVL72 trays); elsewhere
        # NOT_SUPPORTED, once (docs/nvml.md, 'Fabric, NVLink errors, C2C and the recovery
        # action').
        TimedCall(
            "nvmlDeviceGetGpuFabricInfoV",
            lambda h: nvml.nvmlDeviceGetGpuFabricInfoV(h, pynvml.c_nvmlGpuFabricInfo_v3_t()),
            per_sweep=False,
        ),
    ]


def _batches(nvml: Any) -> list[TimedCall]:
    """The field batch as a sweep asks for it; where the slow fields are read only now and
    then, also as the sweeps that read them do."""
    fast = TimedCall(
        _batch_label(_FAST_BATCH), lambda h: nvml.nvmlDeviceGetFieldValues(h, _FAST_BATCH)
    )
    if not _SLOW:
        return [fast]
    full = TimedCall(
        _batch_label(_BATCH), lambda h: nvml.nvmlDeviceGetFieldValues(h, _BATCH), False
    )
    return [fast, full]


# Measuring


@dataclass(frozen=True, slots=True)
class Measured:
    """One timed loop: each call's wall time, and the thread's CPU over the whole loop."""

    wall_us: tuple[float, ...]
    cpu_us: float  # per call, mean, user + system
    # The mean split between user and system; None where the loop was too short for the
    # kernel's tick samples to tell them apart.
    user_us: float | None
    system_us: float | None


def _rusage_split() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime, usage.ru_stime


def _split(cpu_us: float, user_s: float, system_s: float) -> tuple[float | None, float | None]:
    """The precise CPU total, divided as the kernel's samples divide it. A running thread's
    user and system times advance at scheduler ticks (1-10 ms), so a loop of cheap calls may
    see no tick at all; its total comes from the thread's CPU clock, which is exact."""
    sampled = user_s + system_s
    if sampled <= 0:
        return None, None
    user_us = cpu_us * user_s / sampled
    return user_us, max(0.0, cpu_us - user_us)


def measure(call: Callable[[], Any], count: int) -> tuple[Measured | None, NVMLError | None]:
    """Time `count` calls (stopping at the first NVML error); (None, error) if none answered."""
    user0, system0 = _rusage_split()
    cpu0 = time.thread_time()
    walls: list[float] = []
    failure: NVMLError | None = None
    for _ in range(count):
        start = time.perf_counter()
        try:
            call()
        except NVMLError as exc:
            failure = exc
            break
        walls.append((time.perf_counter() - start) * 1e6)
    cpu1 = time.thread_time()
    user1, system1 = _rusage_split()
    if not walls:
        return None, failure
    # A failing call's own time is in the CPU figures; one call in a loop of hundreds.
    calls = len(walls) + (failure is not None)
    cpu_us = (cpu1 - cpu0) * 1e6 / calls
    user_us, system_us = _split(cpu_us, user1 - user0, system1 - system0)
    return Measured(tuple(walls), cpu_us, user_us, system_us), failure


def _failed(measured: Measured | None, failure: NVMLError | None) -> str | None:
    """The error to report: only where no call answered, since answers were then timed."""
    if measured is not None:
        return None
    return error_name(failure) if failure is not None else "no calls made"


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


# NVML functions


@dataclass(frozen=True, slots=True)
class CallTiming:
    label: str
    per_sweep: bool
    calls: int
    median_us: float | None
    p95_us: float | None
    simulated_us: float
    error: str | None  # the NVML error name when the GPU refused the call
    cpu_us: float | None = None  # mean CPU per call of the calling thread, user + system
    user_us: float | None = None  # its split, where the kernel's samples tell
    system_us: float | None = None
    wall_us: tuple[float, ...] = ()  # every timed call, for merging a function's arguments

    @property
    def function(self) -> str:
        return function_of(self.label)

    @property
    def ratio(self) -> float | None:
        """Real over simulated: above 1 the simulator is optimistic."""
        if self.median_us is None or not self.simulated_us:
            return None
        return self.median_us / self.simulated_us


def _timing(spec: TimedCall, measured: Measured | None, error: str | None) -> CallTiming:
    simulated = modelled_call_us(spec.label)
    if measured is None:
        return CallTiming(spec.label, spec.per_sweep, 0, None, None, simulated, error)
    median, p95 = summarise(spec.label, [w / 1e6 for w in measured.wall_us])
    return CallTiming(
        spec.label,
        spec.per_sweep,
        len(measured.wall_us),
        median,
        p95,
        simulated,
        None,
        measured.cpu_us,
        measured.user_us,
        measured.system_us,
        measured.wall_us,
    )


def time_call(spec: TimedCall, handle: Any, repeats: int) -> CallTiming:
    try:
        spec.call(handle)  # the first call may load a symbol or warm a cache: not timed
    except NVMLError as exc:
        return _timing(spec, None, error_name(exc))
    # A call that fails now and then is timed on its answers and named for its failure.
    measured, failure = measure(lambda: spec.call(handle), spec.repeats or repeats)
    return _timing(spec, measured, _failed(measured, failure))


def time_gpm(nvml: Any, handle: Any, repeats: int) -> list[CallTiming]:
    """nvmlGpmSampleGet and nvmlGpmMetricsGet, which need buffers the other calls do not."""
    try:
        request = gpm_pair(nvml, handle)
    except NVMLError as exc:
        name = error_name(exc)
        return [
            _timing(TimedCall(label, lambda h: None, False), None, name)
            for label in ("nvmlGpmSampleGet", "nvmlGpmMetricsGet")
        ]
    try:
        sample = request.sample2
        calls = [
            TimedCall("nvmlGpmSampleGet", lambda h: nvml.nvmlGpmSampleGet(h, sample), False),
            TimedCall("nvmlGpmMetricsGet", lambda h: nvml.nvmlGpmMetricsGet(request), False),
        ]
        return [time_call(spec, handle, repeats) for spec in calls]
    finally:
        for buffer in (request.sample1, request.sample2):
            with contextlib.suppress(NVMLError):
                nvml.nvmlGpmSampleFree(buffer)


def time_nvml_calls(nvml: Any, repeats: int = 300) -> list[CallTiming]:
    """Every call on GPU 0; `nvml` must be initialised."""
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    timings = [time_call(spec, handle, repeats) for spec in timed_calls(nvml)]
    return timings + time_gpm(nvml, handle, repeats)


def sweep_estimate(timings: Sequence[CallTiming]) -> tuple[float, float]:
    """(real, simulated) microseconds of one GPU's per-sweep calls made one after another: what
    a one-GPU sweep costs in NVML, and what the simulator's cost model says it costs."""
    ran = [t for t in timings if t.per_sweep and t.median_us is not None]
    return sum(t.median_us or 0.0 for t in ran), sum(t.simulated_us for t in ran)


# Fields of the batch, one at a time


def field_requests() -> list[FieldRequest]:
    """What the exporter asks nvmlDeviceGetFieldValues for: the batch, each NVLink field on
    link 0 (it asks per link), and the link count it asks for once per GPU."""
    return [*_BATCH, *((field_id, 0) for field_id in NVLINK_FIELDS), NVLINK_LINK_COUNT]


def field_name(field_id: int) -> str:
    """pynvml's constant for a field id; the first defined where two share it."""
    for name, value in vars(pynvml).items():
        if name.startswith("NVML_FI_") and value == field_id:
            return name
    return f"field {field_id}"


def return_name(code: int) -> str | None:
    """None for success, else NVML's error name ("NOT_SUPPORTED")."""
    if code == pynvml.NVML_SUCCESS:
        return None
    return ERROR_NAMES.get(code, f"ERROR_{code}")


@dataclass(frozen=True, slots=True)
class FieldTiming:
    field_id: int
    scope: int | None  # the link, for per-link fields
    name: str
    calls: int
    median_us: float | None
    p95_us: float | None
    cpu_us: float | None
    user_us: float | None
    system_us: float | None
    simulated_us: float
    # The field's own return code's name when it was not success (NOT_SUPPORTED), or the call's
    # error when nvmlDeviceGetFieldValues itself failed.
    nvml_return: str | None

    @property
    def slow(self) -> bool:
        return max(self.median_us or 0.0, self.cpu_us or 0.0) > SLOW_FIELD_US


def time_field(nvml: Any, handle: Any, request: FieldRequest, repeats: int) -> FieldTiming:
    field_id = request[0] if isinstance(request, tuple) else request
    scope = request[1] if isinstance(request, tuple) else None
    name = field_name(field_id)
    simulated = MEASURED.fields([request]).wall_us

    def read() -> Any:
        return nvml.nvmlDeviceGetFieldValues(handle, [request])

    try:
        first = read()  # not timed, as for the calls: it may warm a cache
    except NVMLError as exc:
        empty = (None, None, None, None, None)
        return FieldTiming(field_id, scope, name, 0, *empty, simulated, error_name(exc))
    measured, failure = measure(read, repeats)
    if measured is None:
        empty = (None, None, None, None, None)
        return FieldTiming(field_id, scope, name, 0, *empty, simulated, _failed(None, failure))
    median, p95 = summarise(name, [w / 1e6 for w in measured.wall_us])
    return FieldTiming(
        field_id,
        scope,
        name,
        len(measured.wall_us),
        median,
        p95,
        measured.cpu_us,
        measured.user_us,
        measured.system_us,
        simulated,
        return_name(int(first[0].nvmlReturn)),
    )


def time_fields(nvml: Any, repeats: int = 300) -> list[FieldTiming]:
    """Each field the exporter batches, read alone on GPU 0, slowest first."""
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    timings = [time_field(nvml, handle, request, repeats) for request in field_requests()]
    return sorted(timings, key=lambda t: -(t.median_us or 0.0))
