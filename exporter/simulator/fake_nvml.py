"""A simulated NVML, patched into the `pynvml` module attribute by attribute.

The production collector calls `pynvml.nvmlX(...)`; once `FakeNvml.install()` has run, those names
resolve here. Everything it returns or raises is a real nvidia-ml-py object: `c_nvmlMemory_t`,
`c_nvmlFieldValue_t` arrays, `c_nvmlEventData_t`, ctypes device handles, and the generated
`NVMLError_*` classes. Any `nvml*` function not modelled here raises NOT_SUPPORTED, so the real
library is never loaded.

Fidelity notes (docs/nvml.md, from 'NOT_SUPPORTED matrix' on): NOT_SUPPORTED matrix for MIG
parents, MIG device handles and older boards; FunctionNotFound by driver version; GI ids by
placement; MIG names "<parent> MIG <profile>"; units mW, mJ, bytes, MHz, KB/s. GPU-instance
handles and their info (placement, driver profile id) only for a privileged fleet
(`nvml_privileged`); NO_PERMISSION otherwise. Process lists and per-process utilization come from
the node's process table (`processes`, see docs/nvml.md, 'Process accounting').
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pynvml

from exporter.simulator import gpm_model
from exporter.simulator.call_costs import CHARGE_FLOOR_US, MEASURED, charge
from exporter.simulator.faults import CallFaults
from exporter.simulator.fleet import FleetSpec
from exporter.simulator.precomputed_answers import PrecomputedAnswers
from exporter.simulator.sim_gpu import MIB, SimGpu, SimMigInstance
from exporter.simulator.workload import SHAPES

if TYPE_CHECKING:
    from exporter.simulator.processes import ProcessTable, ProcessUse

# NVML symbols newer than some drivers: calling them on an older driver is FunctionNotFound.
# GPM arrived with R520.
_GPM_CALLS = (
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleFree",
    "nvmlGpmSampleGet",
    "nvmlGpmMigSampleGet",
    "nvmlGpmMetricsGet",
)
_PROCESS_LISTS = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
)
MIN_DRIVER_FOR = {
    **dict.fromkeys(_GPM_CALLS, 520),
    "nvmlDeviceGetCurrentClocksEventReasons": 535,
    "nvmlDeviceGetTemperatureV": 575,
    "nvmlDeviceGetMemoryInfo_v2": 510,
    **{f"{name}_v2": 450 for name in _PROCESS_LISTS},
    **{f"{name}_v3": 510 for name in _PROCESS_LISTS},
    "nvmlDeviceGetProcessesUtilizationInfo": 550,
}
# Symbols a single driver release dropped: 535.98 shipped without the _v3 process lists, and
# 535.104.05 brought them back.
REMOVED_IN = {"535.98": frozenset(f"{name}_v3" for name in _PROCESS_LISTS)}
# nvidia-ml-py's unversioned process-list wrappers call the _v3 symbol and turn its absence into
# NVMLLibraryMismatchError, a plain Exception rather than an NVMLError.
_UNVERSIONED = {name: f"{name}_v3" for name in _PROCESS_LISTS}
# nvml*-named helpers of nvidia-ml-py itself that never reach libnvidia-ml: replacing them would
# break callers that build exception classes or convert structs (nvitop does at import).
_BINDING_HELPERS = frozenset(
    {"nvmlExceptionClass", "nvmlStructToFriendlyObject", "nvmlFriendlyObjectToStruct"}
)
NO_INSTANCE = 0xFFFFFFFF
_GPU_HANDLE_STRIDE = 0x10000
_MIG_HANDLE_STRIDE = 0x100
_EVENT_SET_BASE = 0x7E570000
_GPM_SAMPLE_BASE = 0x69500000
# GPU-instance handles: base + gpu index * stride + GI id (GI ids stay below 15).
_GPU_INSTANCE_BASE = 0x61000000
_GPU_INSTANCE_STRIDE = 0x100
EVENT_QUEUE_DEPTH = 4096
_BASE_EVENTS = (
    pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypePState
    | pynvml.nvmlEventTypeClock
)
_ERROR_TEXT = dict(pynvml.NVMLError._errcode_to_string)
# Board power fields (nvml.h): 185 the 1 s average, 186 the instantaneous draw.
_FIELD_POWER_AVERAGE = getattr(pynvml, "NVML_FI_DEV_POWER_AVERAGE", 185)
_FIELD_POWER_INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)
_FIELD_ECC = {
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: "sbe_volatile",
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: "dbe_volatile",
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: "sbe_aggregate",
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: "dbe_aggregate",
}


class _Unsupported(Exception):
    pass


def _api(
    *,
    device: bool = True,
    on_mig: str = "unsupported",
    name: str | None = None,
    gpu_instance: bool = False,
) -> Callable:
    """Mark a method as the stand-in for one pynvml function.

    on_mig: "unsupported" (NOT_SUPPORTED on MIG device handles), "ok", or "only" (MIG handles only).
    gpu_instance: the first argument is a GPU-instance handle, not a device handle.
    """

    def mark(method: Callable) -> Callable:
        meta = (name or method.__name__, device, on_mig, gpu_instance)
        # A function takes any attribute, but its type declares none.
        method._nvml = meta  # type: ignore[attr-defined]
        return method

    return mark


@dataclass
class _GpmSample:
    """What one allocated GPM sample buffer holds: nothing until nvmlGpm*SampleGet fills it."""

    gpu: int | None = None
    gpu_instance_id: int | None = None
    taken_at: float | None = None


@dataclass
class _EventSet:
    address: int
    cond: threading.Condition = field(default_factory=threading.Condition)
    queue: deque[pynvml.c_nvmlEventData_t] = field(
        default_factory=lambda: deque(maxlen=EVENT_QUEUE_DEPTH)
    )
    masks: dict[int, int] = field(default_factory=dict)  # gpu index -> registered event mask
    lost_pending: set[int] = field(default_factory=set)
    dropped: int = 0
    destroyed: bool = False  # the driver went away under it


class FakeNvml:
    def __init__(
        self,
        fleet: FleetSpec,
        clock: Callable[[], float] = time.monotonic,
        *,
        precomputed: bool = False,
    ) -> None:
        self.fleet = fleet
        self._clock = clock
        self._t0 = clock()
        # Field values carry wall-clock microseconds like the driver's; they advance with the
        # simulated clock so that a caller stepping time sees matching stamps.
        self._wall_t0 = time.time()
        self.gpus = [SimGpu(i, spec, fleet.seed, self.now()) for i, spec in enumerate(fleet.gpus)]
        self.faults = CallFaults()
        self.calls: Counter[str] = Counter()
        self._calls_lock = threading.Lock()
        self._init_count = 0
        self._init_lock = threading.Lock()
        self.driver_loaded = True
        self._event_sets: dict[int, _EventSet] = {}
        self._event_lock = threading.Lock()
        self._next_event_set = 1
        self._gpm_samples: dict[int, _GpmSample] = {}
        self._gpm_lock = threading.Lock()
        self._next_gpm_sample = 1
        self._saved: dict[str, Any] = {}
        # A flat sleep per call under `costs: flat`; measured costs are charged in _charged.
        self.call_latency_s = fleet.call_latency_us / 1e6 if fleet.call_costs == "flat" else 0.0
        self.pcie_window_s = fleet.pcie_window_ms / 1e3
        # The node's GPU processes; None answers every process query with nothing running.
        self.processes: ProcessTable | None = None
        # Replayed answers for cost measurements (precomputed_answers.py); None: computed live.
        self.answers = PrecomputedAnswers(self._gpm_sample) if precomputed else None

    # Time: simulated seconds since an arbitrary epoch, far enough in that lagged signals exist.

    def now(self) -> float:
        return self._clock() - self._t0 + 3600.0

    def timestamp_us(self) -> int:
        """Microseconds since 1970 for `now()`, as `c_nvmlFieldValue_t.timestamp` carries."""
        return int((self._wall_t0 + self._clock() - self._t0) * 1e6)

    # Installing into pynvml

    def install(self) -> FakeNvml:
        if self._saved:
            return self
        implemented = {}
        for attr in dir(self):
            member = getattr(self, attr, None)
            meta = getattr(member, "_nvml", None)
            if meta is not None and callable(member):
                call = self._wrap(member, *meta)
                if self.answers is not None:
                    call = self.answers.wrap(meta[0], call)
                implemented[meta[0]] = self._charged(meta[0], call)
        for name, original in vars(pynvml).items():
            if (
                name.startswith("nvml")
                and inspect.isfunction(original)
                and name not in _BINDING_HELPERS
            ):
                self._saved[name] = original
                setattr(pynvml, name, implemented.get(name) or self._not_modelled(name))
        return self

    def uninstall(self) -> None:
        self.faults.clear()
        for name, original in self._saved.items():
            setattr(pynvml, name, original)
        self._saved.clear()
        with self._event_lock:
            sets = list(self._event_sets.values())
        for event_set in sets:
            with event_set.cond:
                event_set.cond.notify_all()

    def __enter__(self) -> FakeNvml:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def _charged(self, name: str, call: Callable) -> Callable:
        """`call`, costing the caller what the real call costs (call_costs.py), whether its
        answer is computed or replayed; as it is, under flat costs."""
        if self.fleet.call_costs != "measured":
            return call
        if name == "nvmlDeviceGetFieldValues":
            fields = MEASURED.fields

            def charged_fields(*args: Any, **kwargs: Any) -> Any:
                if len(args) > 1:
                    charge(fields(args[1]))
                return call(*args, **kwargs)

            return functools.update_wrapper(charged_fields, call)
        cost = MEASURED.call(name)
        if max(cost.cpu_us, cost.wait_us) < CHARGE_FLOOR_US:
            return call

        def charged(*args: Any, **kwargs: Any) -> Any:
            charge(cost)
            return call(*args, **kwargs)

        return functools.update_wrapper(charged, call)

    def _not_modelled(self, name: str) -> Callable:
        def not_modelled(*args: Any, **kwargs: Any) -> Any:
            self._count(name)
            self._require_init(name)
            raise pynvml.NVMLError_NotSupported()

        not_modelled.__name__ = name
        return not_modelled

    def _count(self, name: str) -> None:
        with self._calls_lock:
            self.calls[name] += 1

    def _require_init(self, name: str) -> None:
        if self._init_count == 0 and name not in (
            "nvmlInit",
            "nvmlInitWithFlags",
            "nvmlShutdown",
            "nvmlErrorString",
        ):
            raise pynvml.NVMLError_Uninitialized()

    def _wrap(
        self, method: Callable, name: str, device: bool, on_mig: str, gpu_instance: bool
    ) -> Callable:
        versioned = _UNVERSIONED.get(name)

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            self._count(name)
            self._require_init(name)
            if self.lacks(name):
                raise pynvml.NVMLError_FunctionNotFound()
            if versioned is not None and self.lacks(versioned):
                raise pynvml.NVMLLibraryMismatchError(
                    f"{name}: the driver has no {versioned}; call a versioned function"
                )
            if not device:
                self.faults.before_call(name, None)
                self._latency()
                return method(*args, **kwargs)
            if not args:
                raise pynvml.NVMLError_InvalidArgument()
            instance: SimMigInstance | None
            if gpu_instance:
                gpu, instance = self._resolve_gpu_instance(args[0])
            else:
                gpu, instance = self._resolve(args[0])
            self.faults.before_call(name, gpu.index)
            if gpu.lost:
                raise pynvml.NVMLError_GpuIsLost()
            if instance is not None and on_mig == "unsupported" and not gpu_instance:
                raise pynvml.NVMLError_NotSupported()
            if instance is None and on_mig == "only":
                raise pynvml.NVMLError_InvalidArgument()
            self._latency()
            return method(gpu, instance, *args[1:], **kwargs)

        return call

    def lacks(self, symbol: str) -> bool:
        """Whether the fleet's driver has no C symbol of this name."""
        minimum = MIN_DRIVER_FOR.get(symbol)
        if minimum is not None and self.fleet.driver_major < minimum:
            return True
        return symbol in REMOVED_IN.get(self.fleet.driver_version, ())

    def _latency(self) -> None:
        if self.call_latency_s > 0:
            time.sleep(self.call_latency_s)

    # Handles: ctypes pointers whose address encodes (gpu, MIG slot); never dereferenced.

    @staticmethod
    def _handle(gpu: int, slot: int | None = None) -> Any:
        address = (gpu + 1) * _GPU_HANDLE_STRIDE + (
            0 if slot is None else (slot + 1) * _MIG_HANDLE_STRIDE
        )
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlDevice_t)

    def _resolve(self, handle: Any) -> tuple[SimGpu, SimMigInstance | None]:
        try:
            address = ctypes.cast(handle, ctypes.c_void_p).value or 0
        except (TypeError, ctypes.ArgumentError):
            raise pynvml.NVMLError_InvalidArgument() from None
        gpu_index, rest = divmod(address, _GPU_HANDLE_STRIDE)
        gpu_index -= 1
        if not 0 <= gpu_index < len(self.gpus) or rest % _MIG_HANDLE_STRIDE:
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self.gpus[gpu_index]
        slot = rest // _MIG_HANDLE_STRIDE - 1
        if slot < 0:
            return gpu, None
        if slot >= len(gpu.mig_slots) or gpu.mig_slots[slot] is None or not gpu.mig_enabled:
            raise pynvml.NVMLError_InvalidArgument()
        return gpu, gpu.mig_slots[slot]

    @staticmethod
    def _gpu_instance_handle(gpu: int, gpu_instance_id: int) -> Any:
        address = _GPU_INSTANCE_BASE + gpu * _GPU_INSTANCE_STRIDE + gpu_instance_id
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlGpuInstance_t)

    def _resolve_gpu_instance(self, handle: Any) -> tuple[SimGpu, SimMigInstance]:
        try:
            address = ctypes.cast(handle, ctypes.c_void_p).value or 0
        except (TypeError, ctypes.ArgumentError):
            raise pynvml.NVMLError_InvalidArgument() from None
        gpu_index, gpu_instance_id = divmod(address - _GPU_INSTANCE_BASE, _GPU_INSTANCE_STRIDE)
        if not 0 <= gpu_index < len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self.gpus[gpu_index]
        # A handle outlives its instance only as a dangling pointer: the instance was destroyed.
        instance = self._live_gpu_instance(gpu, gpu_instance_id)
        if instance is None:
            raise pynvml.NVMLError_InvalidArgument()
        return gpu, instance

    @staticmethod
    def _live_gpu_instance(gpu: SimGpu, gpu_instance_id: int) -> SimMigInstance | None:
        if not gpu.mig_enabled:
            return None
        return next((m for m in gpu.live_instances() if m.gpu_instance_id == gpu_instance_id), None)

    # ---- Control API for tests and --simulate fault injection (not part of NVML) ----

    def lose_gpu(self, index: int) -> None:
        gpu = self.gpus[index]
        gpu.lost = True
        with self._event_lock:
            sets = list(self._event_sets.values())
        for event_set in sets:
            with event_set.cond:
                if index in event_set.masks:
                    event_set.lost_pending.add(index)
                    event_set.cond.notify_all()

    def restore_gpu(self, index: int) -> None:
        self.gpus[index].lost = False

    def unload_driver(self) -> None:
        """The driver goes away: every call fails as if NVML were never initialised."""
        self.driver_loaded = False
        with self._init_lock:
            self._init_count = 0
        # Event sets live in the driver: they go with it, and a waiter wakes to an error instead
        # of queueing events for a handle nobody can free any more.
        with self._event_lock:
            sets = list(self._event_sets.values())
            self._event_sets.clear()
        # GPM sample buffers too: the exporter drops its handles when NVML goes (GpmSampler
        # .invalidate), since freeing a buffer the library already released could crash it.
        with self._gpm_lock:
            self._gpm_samples.clear()
        for event_set in sets:
            with event_set.cond:
                event_set.destroyed = True
                event_set.queue.clear()
                event_set.cond.notify_all()

    def load_driver(self) -> None:
        self.driver_loaded = True

    def inject_xid(self, index: int, xid: int, gpu_instance_id: int | None = None) -> None:
        self._emit(index, pynvml.nvmlEventTypeXidCriticalError, xid, gpu_instance_id)

    def inject_ecc_error(self, index: int, double_bit: bool = True, count: int = 1) -> None:
        gpu = self.gpus[index]
        with gpu.lock:
            if double_bit:
                gpu.ecc_dbe_volatile += count
                if gpu.model.row_remapping:
                    gpu.remapped_uncorrectable += count
                    gpu.remapped_pending = 1
            else:
                gpu.ecc_sbe_volatile += count
        kind = (
            pynvml.nvmlEventTypeDoubleBitEccError
            if double_bit
            else pynvml.nvmlEventTypeSingleBitEccError
        )
        self._emit(index, kind, 0, None)

    def set_temperature_offset(self, index: int, celsius: float) -> None:
        self.gpus[index].temperature_offset_c = celsius

    def set_workload(self, index: int, workload: str) -> None:
        """Switch a GPU's activity (e.g. to "idle": its pod stops using it). Pods stay put."""
        if workload not in SHAPES:
            raise ValueError(f"unknown workload {workload!r} (known: {', '.join(SHAPES)})")
        gpu = self.gpus[index]
        with gpu.lock:
            gpu.workload, gpu.shape = workload, SHAPES[workload]

    def reset_gpu(self, index: int) -> None:
        """`nvidia-smi --gpu-reset`: volatile ECC counts and NVLink data counters start over, a
        pending row remap is applied, and a lost GPU answers again. Aggregate counts and remap
        failures persist."""
        gpu = self.gpus[index]
        with gpu.lock:
            gpu.ecc_sbe_history += gpu.ecc_sbe_volatile
            gpu.ecc_dbe_history += gpu.ecc_dbe_volatile
            gpu.ecc_sbe_volatile = gpu.ecc_dbe_volatile = 0
            gpu.remapped_pending = 0
            gpu.lost = False
        gpu.reset_nvlink_counters(self.now())

    def _emit(self, index: int, event_type: int, data: int, gpu_instance_id: int | None) -> None:
        gi = NO_INSTANCE if gpu_instance_id is None else gpu_instance_id
        ci = NO_INSTANCE if gpu_instance_id is None else 0
        with self._event_lock:
            sets = list(self._event_sets.values())
        for event_set in sets:
            with event_set.cond:
                if not event_set.masks.get(index, 0) & event_type:
                    continue
                if len(event_set.queue) == event_set.queue.maxlen:
                    event_set.dropped += 1
                event_set.queue.append(
                    pynvml.c_nvmlEventData_t(
                        device=self._handle(index),
                        eventType=event_type,
                        eventData=data,
                        gpuInstanceId=gi,
                        computeInstanceId=ci,
                    )
                )
                event_set.cond.notify()

    # ---- GPU Performance Monitoring (Hopper and newer) ----

    @property
    def gpm_samples_allocated(self) -> int:
        """Sample buffers allocated and not yet freed: a leak check for tests."""
        with self._gpm_lock:
            return len(self._gpm_samples)

    def _gpm_sample(self, sample: Any) -> _GpmSample:
        try:
            address = ctypes.cast(sample, ctypes.c_void_p).value or 0
        except (TypeError, ctypes.ArgumentError):
            raise pynvml.NVMLError_InvalidArgument() from None
        with self._gpm_lock:
            found = self._gpm_samples.get(address)
        if found is None:
            raise pynvml.NVMLError_InvalidArgument()
        return found

    @_api(on_mig="unsupported")
    def nvmlGpmQueryDeviceSupport(self, gpu: SimGpu, instance: None) -> Any:
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(gpu.model.gpm_supported)
        return support

    @_api(device=False)
    def nvmlGpmSampleAlloc(self) -> Any:
        with self._gpm_lock:
            address = _GPM_SAMPLE_BASE + self._next_gpm_sample * 0x100
            self._next_gpm_sample += 1
            self._gpm_samples[address] = _GpmSample()
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlGpmSample_t)

    @_api(device=False)
    def nvmlGpmSampleFree(self, sample: Any) -> None:
        address = ctypes.cast(sample, ctypes.c_void_p).value or 0
        with self._gpm_lock:
            if self._gpm_samples.pop(address, None) is None:
                raise pynvml.NVMLError_InvalidArgument()

    @_api(on_mig="unsupported")
    def nvmlGpmSampleGet(self, gpu: SimGpu, instance: None, sample: Any) -> Any:
        record = self._gpm_sample(sample)
        if not gpu.model.gpm_supported:
            raise pynvml.NVMLError_NotSupported()
        record.gpu, record.gpu_instance_id, record.taken_at = gpu.index, None, self.now()
        return sample

    @_api(on_mig="unsupported")
    def nvmlGpmMigSampleGet(self, gpu: SimGpu, instance: None, gi: int, sample: Any) -> Any:
        record = self._gpm_sample(sample)
        if not gpu.model.gpm_supported or not gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        if gi not in {m.gpu_instance_id for m in gpu.live_instances()}:
            raise pynvml.NVMLError_NotFound()
        record.gpu, record.gpu_instance_id, record.taken_at = gpu.index, gi, self.now()
        return sample

    @_api(device=False)
    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first, second = self._gpm_sample(request.sample1), self._gpm_sample(request.sample2)
        if (
            first.taken_at is None
            or second.taken_at is None
            or (first.gpu, first.gpu_instance_id) != (second.gpu, second.gpu_instance_id)
            or second.taken_at <= first.taken_at
            or not 0 < request.numMetrics <= pynvml.NVML_GPM_METRIC_MAX
        ):
            raise pynvml.NVMLError_InvalidArgument()
        assert first.gpu is not None
        gpu = self.gpus[first.gpu]
        if gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        instance = None
        if first.gpu_instance_id is not None:
            instance = next(
                (m for m in gpu.live_instances() if m.gpu_instance_id == first.gpu_instance_id),
                None,
            )
            if instance is None:
                raise pynvml.NVMLError_NotFound()
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            value = gpm_model.metric_value(
                metric.metricId, gpu, instance, first.taken_at, second.taken_at
            )
            if value is None:
                metric.nvmlReturn, metric.value = pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0
                continue
            metric.nvmlReturn, metric.value = pynvml.NVML_SUCCESS, value
            short, long, unit = gpm_model.metric_names(metric.metricId)
            metric.metricInfo.shortName, metric.metricInfo.longName = short, long
            metric.metricInfo.unit = unit
        return request

    # ---- Library and system ----

    @_api(device=False)
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    @_api(device=False)
    def nvmlInitWithFlags(self, flags: int) -> None:
        self.faults.before_call("nvmlInit", None)
        if not self.driver_loaded:
            raise pynvml.NVMLError_DriverNotLoaded()
        with self._init_lock:
            self._init_count += 1

    @_api(device=False)
    def nvmlShutdown(self) -> None:
        with self._init_lock:
            self._init_count = max(0, self._init_count - 1)

    @_api(device=False)
    def nvmlErrorString(self, result: int) -> bytes:
        return _ERROR_TEXT.get(result, "Unknown Error").encode()

    @_api(device=False)
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.fleet.driver_version

    @_api(device=False)
    def nvmlSystemGetNVMLVersion(self) -> str:
        return f"12.{self.fleet.driver_version}"

    @_api(device=False)
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    @_api(device=False)
    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    @_api(device=False)
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not isinstance(index, int) or not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        self.faults.before_call("nvmlDeviceGetHandleByIndex", index)
        if self.gpus[index].lost:
            raise pynvml.NVMLError_GpuIsLost()
        return self._handle(index)

    @_api(device=False)
    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Any:
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self.gpus:
            if gpu.uuid == text:
                return self._handle(gpu.index)
            for m in gpu.live_instances():
                if m.uuid == text and gpu.mig_enabled:
                    return self._handle(gpu.index, m.slot)
        raise pynvml.NVMLError_NotFound()

    @_api(device=False)
    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str | bytes) -> Any:
        text = (bus_id.decode() if isinstance(bus_id, bytes) else bus_id).upper()
        for gpu in self.gpus:
            if text in (gpu.pci_bus_id, gpu.pci_bus_id[4:]):
                return self._handle(gpu.index)
        raise pynvml.NVMLError_NotFound()

    # ---- Identity ----

    @_api(on_mig="ok")
    def nvmlDeviceGetUUID(self, gpu: SimGpu, instance: SimMigInstance | None) -> str:
        return gpu.uuid if instance is None else instance.uuid

    @_api(on_mig="ok")
    def nvmlDeviceGetName(self, gpu: SimGpu, instance: SimMigInstance | None) -> str:
        if instance is None:
            return gpu.model.name
        return f"{gpu.model.name} MIG {instance.profile_name}"

    @_api()
    def nvmlDeviceGetSerial(self, gpu: SimGpu, instance: None) -> str:
        return gpu.serial

    @_api()
    def nvmlDeviceGetIndex(self, gpu: SimGpu, instance: None) -> int:
        return gpu.index

    @_api()
    def nvmlDeviceGetMinorNumber(self, gpu: SimGpu, instance: None) -> int:
        return gpu.index

    @_api(on_mig="ok")
    def nvmlDeviceGetPciInfo_v3(self, gpu: SimGpu, instance: SimMigInstance | None) -> Any:
        return pynvml.nvmlPciInfo_t(
            busIdLegacy=f"0000:{gpu.pci_bus:02X}:00.0".encode(),
            domain=0,
            bus=gpu.pci_bus,
            device=0,
            pciDeviceId=gpu.model.pci_device_id,
            pciSubSystemId=(gpu.model.pci_device_id & 0xFFFF0000) | 0x10DE,
            busId=gpu.pci_bus_id.encode(),
        )

    @_api(on_mig="ok")
    def nvmlDeviceGetPciInfo(self, gpu: SimGpu, instance: SimMigInstance | None) -> Any:
        return self.nvmlDeviceGetPciInfo_v3(gpu, instance)

    @_api()
    def nvmlDeviceGetArchitecture(self, gpu: SimGpu, instance: None) -> int:
        return gpu.model.architecture

    @_api()
    def nvmlDeviceGetCudaComputeCapability(self, gpu: SimGpu, instance: None) -> tuple[int, int]:
        return gpu.model.compute_capability

    # ---- Sensors ----

    @_api()
    def nvmlDeviceGetTemperature(self, gpu: SimGpu, instance: None, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError_InvalidArgument()
        return gpu.temperature_c(self.now())

    @_api()
    def nvmlDeviceGetUtilizationRates(self, gpu: SimGpu, instance: None) -> Any:
        if gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        t = self.now()
        return pynvml.c_nvmlUtilization_t(
            gpu=round(gpu.utilization(t) * 100), memory=round(gpu.memory_copy_utilization(t) * 100)
        )

    @_api()
    def nvmlDeviceGetEncoderUtilization(self, gpu: SimGpu, instance: None) -> list[int]:
        if gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        return [0, 167_000]

    @_api()
    def nvmlDeviceGetDecoderUtilization(self, gpu: SimGpu, instance: None) -> list[int]:
        if gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        return [round(gpu.decoder_utilization(self.now()) * 100), 167_000]

    @_api(on_mig="ok")
    def nvmlDeviceGetMemoryInfo(
        self, gpu: SimGpu, instance: SimMigInstance | None, version: int | None = None
    ) -> Any:
        if version and self.fleet.driver_major < MIN_DRIVER_FOR["nvmlDeviceGetMemoryInfo_v2"]:
            raise pynvml.NVMLError_FunctionNotFound()
        t = self.now()
        if instance is not None:
            total, used, free = gpu.instance_memory(instance, t)
            reserved = 0
        else:
            total, reserved, used, free = gpu.memory(t)
        # v2 splits the board into used + free + reserved; v1, which has no reserved field,
        # counts the reservation as used (docs/nvml.md, 'Framebuffer memory').
        if version:
            return pynvml.c_nvmlMemory_v2_t(
                version=version, total=total, reserved=reserved, free=free, used=used
            )
        return pynvml.c_nvmlMemory_t(total=total, free=free, used=used + reserved)

    @_api()
    def nvmlDeviceGetPowerUsage(self, gpu: SimGpu, instance: None) -> int:
        t = self.now()
        return gpu.power_average_mw(t) if gpu.model.averaged_power else gpu.power_mw(t)

    @_api()
    def nvmlDeviceGetPowerManagementLimit(self, gpu: SimGpu, instance: None) -> int:
        return gpu.power_limit_mw()

    @_api()
    def nvmlDeviceGetPowerManagementDefaultLimit(self, gpu: SimGpu, instance: None) -> int:
        return gpu.model.tdp_mw

    @_api()
    def nvmlDeviceGetPowerManagementLimitConstraints(
        self, gpu: SimGpu, instance: None
    ) -> list[int]:
        # [min, max] in mW, as the binding returns them; a model without published bounds
        # answers its default limit for both.
        model = gpu.model
        return [model.power_limit_min_mw or model.tdp_mw, model.power_limit_max_mw or model.tdp_mw]

    @_api()
    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: SimGpu, instance: None) -> int:
        return gpu.power_limit_mw()

    @_api()
    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: SimGpu, instance: None) -> int:
        return gpu.energy_mj(self.now())

    @_api()
    def nvmlDeviceGetClockInfo(self, gpu: SimGpu, instance: None, clock_type: int) -> int:
        t = self.now()
        if clock_type in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM):
            return gpu.sm_clock_mhz(t)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return gpu.mem_clock_mhz(t)
        if clock_type == pynvml.NVML_CLOCK_VIDEO:
            return int(gpu.sm_clock_mhz(t) * 0.9)
        raise pynvml.NVMLError_InvalidArgument()

    @_api()
    def nvmlDeviceGetMaxClockInfo(self, gpu: SimGpu, instance: None, clock_type: int) -> int:
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return gpu.model.mem_clock_mhz
        return gpu.model.max_sm_clock_mhz

    @_api()
    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: SimGpu, instance: None) -> int:
        return gpu.clock_event_reasons(self.now())

    @_api()
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: SimGpu, instance: None) -> int:
        return gpu.clock_event_reasons(self.now())

    # ---- vGPU licensing ----

    @_api()
    def nvmlDeviceGetGridLicensableFeatures_v4(self, gpu: SimGpu, instance: None) -> Any:
        features = pynvml.c_nvmlGridLicensableFeatures_v4_t()
        if gpu.vgpu_license is None:
            return features  # bare metal: isGridLicenseSupported = 0, no features
        features.isGridLicenseSupported = 1
        features.licensableFeaturesCount = 1
        vgpu = features.gridLicensableFeatures[0]
        vgpu.featureCode = pynvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU
        vgpu.featureState = int(gpu.vgpu_license == "licensed")
        vgpu.featureEnabled = 1
        vgpu.productName = b"NVIDIA Virtual Compute Server"
        return features

    @_api()
    def nvmlDeviceGetGridLicensableFeatures(self, gpu: SimGpu, instance: None) -> Any:
        return self.nvmlDeviceGetGridLicensableFeatures_v4(gpu, instance)

    # ---- Reliability ----

    @_api()
    def nvmlDeviceGetEccMode(self, gpu: SimGpu, instance: None) -> list[int]:
        mode = int(gpu.ecc_enabled)
        return [mode, mode]

    @_api()
    def nvmlDeviceGetTotalEccErrors(
        self, gpu: SimGpu, instance: None, error_type: int, counter_type: int
    ) -> int:
        key = ("sbe" if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "dbe") + (
            "_volatile" if counter_type == pynvml.NVML_VOLATILE_ECC else "_aggregate"
        )
        return self._ecc(gpu, key)

    def _ecc(self, gpu: SimGpu, key: str) -> int:
        if not gpu.ecc_enabled:
            raise pynvml.NVMLError_NotSupported()
        # On a MIG-enabled board the volatile single-bit counter is not available.
        if gpu.mig_enabled and key == "sbe_volatile":
            raise pynvml.NVMLError_NotSupported()
        return gpu.ecc_totals()[key]

    def _remapped(self, gpu: SimGpu) -> tuple[int, int, int, int]:
        if not gpu.model.row_remapping or (gpu.mig_enabled and gpu.live_instances()):
            raise pynvml.NVMLError_NotSupported()
        return (
            gpu.remapped_correctable,
            gpu.remapped_uncorrectable,
            gpu.remapped_pending,
            gpu.remapped_failure,
        )

    @_api()
    def nvmlDeviceGetRemappedRows(self, gpu: SimGpu, instance: None) -> tuple[int, int, int, int]:
        return self._remapped(gpu)

    @_api()
    def nvmlDeviceGetPcieReplayCounter(self, gpu: SimGpu, instance: None) -> int:
        return gpu.pcie_replays

    @_api()
    def nvmlDeviceGetPcieThroughput(self, gpu: SimGpu, instance: None, counter: int) -> int:
        if counter not in (pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES):
            raise pynvml.NVMLError_InvalidArgument()
        if self.pcie_window_s > 0:
            time.sleep(self.pcie_window_s)  # the real call blocks for its sample window
        return gpu.pcie_kbps(self.now(), counter == pynvml.NVML_PCIE_UTIL_TX_BYTES)

    # ---- Field values ----

    @_api(on_mig="ok")
    def nvmlDeviceGetFieldValues(
        self, gpu: SimGpu, instance: SimMigInstance | None, field_ids: list[Any]
    ) -> Any:
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        t = self.now()
        stamp = self.timestamp_us()
        for i, requested in enumerate(field_ids):
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            entry = values[i]
            entry.fieldId, entry.scopeId, entry.timestamp = field_id, scope, stamp
            try:
                if instance is not None:
                    raise _Unsupported  # board counters are not served per MIG device
                value = self._field(gpu, field_id, scope, t)
            except _Unsupported:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            except pynvml.NVMLError as exc:
                entry.nvmlReturn = exc.value
                continue
            entry.nvmlReturn = pynvml.NVML_SUCCESS
            if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                entry.value.uiVal = value
            else:
                entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                entry.value.ullVal = value
        return values

    def _field(self, gpu: SimGpu, field_id: int, scope: int, t: float) -> int:
        if field_id in _FIELD_ECC:
            try:
                return self._ecc(gpu, _FIELD_ECC[field_id])
            except pynvml.NVMLError_NotSupported:
                raise _Unsupported from None
        if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
            if not gpu.model.hbm:
                raise _Unsupported
            return gpu.memory_temperature_c(t)
        if field_id == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            return gpu.energy_mj(t)
        if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
            return gpu.pcie_replays
        if field_id == _FIELD_POWER_INSTANT:
            return gpu.power_mw(t)
        if field_id == _FIELD_POWER_AVERAGE:
            if not gpu.model.averaged_power:
                raise _Unsupported
            return gpu.power_average_mw(t)
        if field_id == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            if not gpu.model.nvlink_links:
                raise _Unsupported
            return gpu.model.nvlink_links
        if field_id in (
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        ):
            if not gpu.model.nvlink_links:
                raise _Unsupported
            if scope >= gpu.model.nvlink_links:
                raise pynvml.NVMLError_InvalidArgument()
            return gpu.nvlink_kib(
                t, scope, field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
            )
        remap_fields = (
            pynvml.NVML_FI_DEV_REMAPPED_COR,
            pynvml.NVML_FI_DEV_REMAPPED_UNC,
            pynvml.NVML_FI_DEV_REMAPPED_PENDING,
            pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
        )
        if field_id in remap_fields:
            try:
                return self._remapped(gpu)[remap_fields.index(field_id)]
            except pynvml.NVMLError_NotSupported:
                raise _Unsupported from None
        raise _Unsupported

    # ---- MIG ----

    @_api()
    def nvmlDeviceGetMigMode(self, gpu: SimGpu, instance: None) -> list[int]:
        if not gpu.model.mig_capable:
            raise pynvml.NVMLError_NotSupported()
        mode = int(gpu.mig_enabled)
        return [mode, mode]

    @_api()
    def nvmlDeviceGetMaxMigDeviceCount(self, gpu: SimGpu, instance: None) -> int:
        return 7 if gpu.mig_enabled else 0

    @_api()
    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu: SimGpu, instance: None, index: int) -> Any:
        if not gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        if not 0 <= index < 7:
            raise pynvml.NVMLError_InvalidArgument()
        if index >= len(gpu.mig_slots) or gpu.mig_slots[index] is None:
            raise pynvml.NVMLError_NotFound()
        return self._handle(gpu.index, index)

    @_api(on_mig="ok")
    def nvmlDeviceIsMigDeviceHandle(self, gpu: SimGpu, instance: SimMigInstance | None) -> Any:
        return ctypes.c_uint(int(instance is not None))

    @_api(on_mig="only")
    def nvmlDeviceGetGpuInstanceId(self, gpu: SimGpu, instance: SimMigInstance) -> int:
        return instance.gpu_instance_id

    @_api(on_mig="only")
    def nvmlDeviceGetComputeInstanceId(self, gpu: SimGpu, instance: SimMigInstance) -> int:
        return instance.compute_instance_id

    @_api(on_mig="only")
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
        self, gpu: SimGpu, instance: SimMigInstance
    ) -> Any:
        return self._handle(gpu.index)

    @_api(on_mig="ok")
    def nvmlDeviceGetAttributes_v2(self, gpu: SimGpu, instance: SimMigInstance | None) -> Any:
        if instance is None:
            raise pynvml.NVMLError_NotSupported()
        slices = instance.compute_slices
        return pynvml.c_nvmlDeviceAttributes(
            multiprocessorCount=instance.multiprocessors,
            sharedCopyEngineCount=slices,
            sharedDecoderCount=max(0, slices // 2),
            sharedEncoderCount=0,
            sharedJpegCount=max(0, slices // 3),
            sharedOfaCount=int(slices == 7),
            gpuInstanceSliceCount=slices,
            computeInstanceSliceCount=slices,
            memorySizeMB=instance.memory_mib,
        )

    @_api(on_mig="ok")
    def nvmlDeviceGetAttributes(self, gpu: SimGpu, instance: SimMigInstance | None) -> Any:
        return self.nvmlDeviceGetAttributes_v2(gpu, instance)

    @_api()
    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, gpu: SimGpu, instance: None, profile: int, version: int = 2
    ) -> Any:
        # A MIG-capable board answers with MIG off too (seen on a real H200, driver 580); a
        # board without MIG has no profile to match.
        match = next((p for p in gpu.model.mig_profiles if p.enum_index == profile), None)
        if match is None:
            raise pynvml.NVMLError_NotSupported()
        info = (
            pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            if version == 2
            else pynvml.c_nvmlGpuInstanceProfileInfo_t()
        )
        info.id = match.profile_id  # the driver's id, not the enum index passed in
        info.isP2pSupported = 0
        info.sliceCount = match.compute_slices
        info.instanceCount = match.max_count
        info.multiprocessorCount = match.multiprocessors
        info.copyEngineCount = match.compute_slices
        info.decoderCount = match.compute_slices // 2
        info.encoderCount = 0
        info.jpegCount = match.compute_slices // 3
        info.ofaCount = int(match.compute_slices == 7)
        info.memorySizeMB = match.memory_mib
        if version == 2:
            info.name = f"MIG {match.name}".encode()
        return info

    @_api()
    def nvmlDeviceGetGpuInstanceById(self, gpu: SimGpu, instance: None, gi: int) -> Any:
        if not self.fleet.nvml_privileged:
            raise pynvml.NVMLError_NoPermission()
        if not gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        if self._live_gpu_instance(gpu, gi) is None:
            raise pynvml.NVMLError_NotFound()
        return self._gpu_instance_handle(gpu.index, gi)

    @_api(gpu_instance=True)
    def nvmlGpuInstanceGetInfo(self, gpu: SimGpu, instance: SimMigInstance) -> Any:
        return pynvml.c_nvmlGpuInstanceInfo_t(
            device=self._handle(gpu.index),
            id=instance.gpu_instance_id,
            profileId=instance.profile_id,  # the driver's id (19 for 1g), not the enum index
            placement=pynvml.c_nvmlGpuInstancePlacement_t(
                start=instance.placement_start, size=instance.placement_size
            ),
        )

    @_api()
    def nvmlDeviceGetGpuInstances(self, gpu: SimGpu, instance: None, *args: Any) -> Any:
        # Not modelled for a privileged caller (nothing reads it): NOT_SUPPORTED, as for any
        # unmodelled call.
        if self.fleet.nvml_privileged:
            raise pynvml.NVMLError_NotSupported()
        raise pynvml.NVMLError_NoPermission()

    # ---- Processes (docs/nvml.md, 'Process accounting') ----

    def _running(
        self, gpu: SimGpu, instance: SimMigInstance | None, compute: bool = True
    ) -> list[Any]:
        # A MIG-enabled parent's handle answers with every instance's processes, and only to a
        # privileged caller; a MIG device handle lists its own instance's.
        if gpu.mig_enabled and instance is None and not self.fleet.nvml_privileged:
            raise pynvml.NVMLError_NoPermission()
        if self.processes is None or not compute:
            return []  # no display and no MPS server on the simulated node
        compute_instances = {m.gpu_instance_id: m.compute_instance_id for m in gpu.live_instances()}
        listed = []
        for process, used in self.processes.memory(gpu, instance, self.now()):
            gi = process.gpu_instance_id
            info = pynvml.c_nvmlProcessInfo_v2_t(
                pid=process.pid,
                usedGpuMemory=used,
                gpuInstanceId=NO_INSTANCE if gi is None else gi,
                computeInstanceId=NO_INSTANCE if gi is None else compute_instances[gi],
            )
            listed.append(pynvml.nvmlStructToFriendlyObject(info))
        return listed

    @_api(on_mig="ok")
    def nvmlDeviceGetComputeRunningProcesses_v3(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance)

    @_api(on_mig="ok")
    def nvmlDeviceGetComputeRunningProcesses_v2(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance)

    @_api(on_mig="ok")
    def nvmlDeviceGetComputeRunningProcesses(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance)

    @_api(on_mig="ok")
    def nvmlDeviceGetGraphicsRunningProcesses_v3(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    @_api(on_mig="ok")
    def nvmlDeviceGetGraphicsRunningProcesses_v2(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    @_api(on_mig="ok")
    def nvmlDeviceGetGraphicsRunningProcesses(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    @_api(on_mig="ok")
    def nvmlDeviceGetMPSComputeRunningProcesses_v3(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    @_api(on_mig="ok")
    def nvmlDeviceGetMPSComputeRunningProcesses_v2(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    @_api(on_mig="ok")
    def nvmlDeviceGetMPSComputeRunningProcesses(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    def _samples(self, gpu: SimGpu, last_seen: int) -> tuple[int, list[ProcessUse]]:
        """(timestamp, busy processes) of the sample newer than `last_seen`, or NOT_FOUND.

        The simulated board samples continuously, as its utilization rates do: a query sees one
        sample per busy process, stamped with the query's instant."""
        if gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()  # no per-process utilization under MIG
        since = ctypes.c_ulonglong(last_seen).value  # what the binding passes to the driver
        stamp = self.timestamp_us()
        if self.processes is None or stamp <= since:
            raise pynvml.NVMLError_NotFound()
        busy = [use for use in self.processes.utilization(gpu, self.now()) if use.busy]
        if not busy:
            raise pynvml.NVMLError_NotFound()
        return stamp, busy

    @_api()
    def nvmlDeviceGetProcessUtilization(
        self, gpu: SimGpu, instance: None, last_seen: int
    ) -> list[Any]:
        stamp, busy = self._samples(gpu, last_seen)
        return [
            pynvml.c_nvmlProcessUtilizationSample_t(
                pid=use.process.pid,
                timeStamp=stamp,
                smUtil=use.sm_pct,
                memUtil=use.memory_pct,
                encUtil=use.encoder_pct,
                decUtil=use.decoder_pct,
            )
            for use in busy
        ]

    @_api()
    def nvmlDeviceGetProcessesUtilizationInfo(
        self, gpu: SimGpu, instance: None, last_seen: int
    ) -> list[Any]:
        stamp, busy = self._samples(gpu, last_seen)
        return [
            pynvml.c_nvmlProcessUtilizationInfo_v1_t(
                timeStamp=stamp,
                pid=use.process.pid,
                smUtil=use.sm_pct,
                memUtil=use.memory_pct,
                encUtil=use.encoder_pct,
                decUtil=use.decoder_pct,
                jpgUtil=0,
                ofaUtil=0,
            )
            for use in busy
        ]

    # ---- Events ----

    @_api()
    def nvmlDeviceGetSupportedEventTypes(self, gpu: SimGpu, instance: None) -> int:
        mask = _BASE_EVENTS
        if gpu.model.mig_capable:
            mask |= pynvml.nvmlEventMigConfigChange
        return mask

    @_api(device=False)
    def nvmlEventSetCreate(self) -> Any:
        with self._event_lock:
            address = _EVENT_SET_BASE + self._next_event_set * 16
            self._next_event_set += 1
            self._event_sets[address] = _EventSet(address)
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlEventSet_t)

    def _event_set(self, handle: Any) -> _EventSet:
        address = ctypes.cast(handle, ctypes.c_void_p).value or 0
        with self._event_lock:
            event_set = self._event_sets.get(address)
        if event_set is None:
            raise pynvml.NVMLError_InvalidArgument()
        return event_set

    @_api()
    def nvmlDeviceRegisterEvents(
        self, gpu: SimGpu, instance: None, event_types: int, event_set: Any
    ) -> None:
        target = self._event_set(event_set)
        supported = event_types & self.nvmlDeviceGetSupportedEventTypes(gpu, None)
        if not supported:
            raise pynvml.NVMLError_NotSupported()
        with target.cond:
            target.masks[gpu.index] = target.masks.get(gpu.index, 0) | supported

    @_api(device=False)
    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        target = self._event_set(event_set)
        deadline = time.monotonic() + timeout_ms / 1000
        with target.cond:
            while True:
                if target.destroyed:
                    raise pynvml.NVMLError_Uninitialized()
                if target.lost_pending:
                    target.lost_pending.pop()
                    raise pynvml.NVMLError_GpuIsLost()
                if target.queue:
                    return target.queue.popleft()
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._saved:
                    raise pynvml.NVMLError_Timeout()
                target.cond.wait(remaining)

    @_api(device=False)
    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:
        return self.nvmlEventSetWait_v2(event_set, timeout_ms)

    @_api(device=False)
    def nvmlEventSetFree(self, event_set: Any) -> None:
        target = self._event_set(event_set)
        with self._event_lock:
            self._event_sets.pop(target.address, None)
        with target.cond:
            target.cond.notify_all()

    def registered_gpus(self) -> set[int]:
        """GPU indexes some event set listens to for XIDs (test helper)."""
        with self._event_lock:
            sets = list(self._event_sets.values())
        return {
            index
            for event_set in sets
            for index, mask in event_set.masks.items()
            if mask & pynvml.nvmlEventTypeXidCriticalError
        }

    def events_dropped(self) -> int:
        """Events lost because an event set's queue was full, as the driver drops them (test
        helper)."""
        with self._event_lock:
            sets = list(self._event_sets.values())
        return sum(event_set.dropped for event_set in sets)

    def event_sets_open(self) -> int:
        with self._event_lock:
            return len(self._event_sets)

    def memory_bytes(self, index: int) -> tuple[int, int, int, int]:
        return self.gpus[index].memory(self.now())


__all__ = ["MIB", "FakeNvml"]
