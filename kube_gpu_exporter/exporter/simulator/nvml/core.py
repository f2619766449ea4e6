"""What every part of the simulated NVML shares: the fleet's GPUs, simulated time, the library's
init count, which symbols the fleet's driver has, and the handles NVML hands out.

Each NVML area (devices.py, mig.py, gpm.py, ...) is a mixin over NvmlCore; its stand-ins for
pynvml functions are methods marked with `nvml_call`, which api.py wraps into the object callers
are handed.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.simulator.faults import CallFaults
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu, SimMigInstance

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
PROCESS_LISTS = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
)
MIN_DRIVER_FOR = {
    **dict.fromkeys(_GPM_CALLS, 520),
    "nvmlDeviceGetCurrentClocksEventReasons": 535,
    "nvmlDeviceGetTemperatureV": 575,
    "nvmlDeviceGetMemoryInfo_v2": 510,
    **{f"{name}_v2": 450 for name in PROCESS_LISTS},
    **{f"{name}_v3": 510 for name in PROCESS_LISTS},
    "nvmlDeviceGetProcessesUtilizationInfo": 550,
}
# Symbols a single driver release dropped: 535.98 shipped without the _v3 process lists, and
# 535.104.05 brought them back.
REMOVED_IN = {"535.98": frozenset(f"{name}_v3" for name in PROCESS_LISTS)}
NO_INSTANCE = 0xFFFFFFFF
_GPU_HANDLE_STRIDE = 0x10000
_MIG_HANDLE_STRIDE = 0x100
# GPU-instance handles: base + gpu index * stride + GI id (GI ids stay below 15).
_GPU_INSTANCE_BASE = 0x61000000
_GPU_INSTANCE_STRIDE = 0x100
# Calls that work before nvmlInit, as in the real library.
_WITHOUT_INIT = frozenset({"nvmlInit", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString"})


def nvml_call(
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


class NvmlCore:
    def __init__(self, fleet: FleetSpec, clock: Callable[[], float] = time.monotonic) -> None:
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
        # A flat sleep per call under `costs: flat`; measured costs are charged by api.py.
        self.call_latency_s = fleet.call_latency_us / 1e6 if fleet.call_costs == "flat" else 0.0
        self.pcie_window_s = fleet.pcie_window_ms / 1e3

    # Time: simulated seconds since an arbitrary epoch, far enough in that lagged signals exist.

    def now(self) -> float:
        return self._clock() - self._t0 + 3600.0

    def timestamp_us(self) -> int:
        """Microseconds since 1970 for `now()`, as `c_nvmlFieldValue_t.timestamp` carries."""
        return int((self._wall_t0 + self._clock() - self._t0) * 1e6)

    # The library's bookkeeping, checked on every call (api.py)

    def count_call(self, name: str) -> None:
        with self._calls_lock:
            self.calls[name] += 1

    def require_init(self, name: str) -> None:
        if self._init_count == 0 and name not in _WITHOUT_INIT:
            raise pynvml.NVMLError_Uninitialized()

    def lacks(self, symbol: str) -> bool:
        """Whether the fleet's driver has no C symbol of this name."""
        minimum = MIN_DRIVER_FOR.get(symbol)
        if minimum is not None and self.fleet.driver_major < minimum:
            return True
        return symbol in REMOVED_IN.get(self.fleet.driver_version, ())

    def latency(self) -> None:
        if self.call_latency_s > 0:
            time.sleep(self.call_latency_s)

    # Handles: ctypes pointers whose address encodes (gpu, MIG slot); never dereferenced.

    @staticmethod
    def _handle(gpu: int, slot: int | None = None) -> Any:
        address = (gpu + 1) * _GPU_HANDLE_STRIDE + (
            0 if slot is None else (slot + 1) * _MIG_HANDLE_STRIDE
        )
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlDevice_t)

    def resolve(self, handle: Any) -> tuple[SimGpu, SimMigInstance | None]:
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

    def resolve_gpu_instance(self, handle: Any) -> tuple[SimGpu, SimMigInstance]:
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
