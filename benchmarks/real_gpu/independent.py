"""Per-GPU facts read with pynvml calls of our own, independent of the exporter's reader.

Deliberately plain: one documented call per fact, no batching through field values and no
fallback chains beyond the memory API's version, so a bug in the exporter's cleverer reader
cannot hide behind the same bug here. The caller initialises NVML (and shuts it down), and hands
the functions its `nvml`: the `pynvml` module on a GPU host, the simulator's api object under
--simulate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from benchmarks.real_gpu import GpuFacts, bus_id_key

T = TypeVar("T")

# NVML return code -> its name without the NVML_ERROR_ prefix, e.g. 3 -> "NOT_SUPPORTED".
ERROR_NAMES: dict[int, str] = {
    value: name.removeprefix("NVML_ERROR_")
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}


def error_name(err: pynvml.NVMLError) -> str:
    return ERROR_NAMES.get(err.value, f"ERROR_{err.value}")


class _Calls:
    """Runs NVML calls, turning an NVML error into None and remembering each function's outcome.

    A function counts as "ok" once it answered on any GPU: a MIG-enabled GPU refusing
    utilization says nothing about the model's support for it.
    """

    def __init__(self, support: dict[str, str] | None) -> None:
        self.support = support if support is not None else {}

    def __call__(self, function: Callable[..., T], *args: Any) -> T | None:
        name = function.__name__
        try:
            result = function(*args)
        except pynvml.NVMLError as err:
            self.support.setdefault(name, error_name(err))
            return None
        self.support[name] = "ok"
        return result


def nvml_facts(nvml: Any, support: dict[str, str] | None = None) -> dict[str, GpuFacts]:
    """Every GPU NVML enumerates, keyed by `bus_id_key`; NVML must already be initialised.

    `support`, when given, receives each NVML function's outcome: "ok" or the error's name.
    """
    call = _Calls(support)
    facts: dict[str, GpuFacts] = {}
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        pci = nvml.nvmlDeviceGetPciInfo(handle)
        facts[bus_id_key(_str(pci.busId))] = _facts(nvml, call, handle, pci)
    return facts


def _facts(nvml: Any, call: _Calls, handle: Any, pci: Any) -> GpuFacts:
    name = call(nvml.nvmlDeviceGetName, handle)
    memory = _memory(nvml, call, handle)
    utilization = call(nvml.nvmlDeviceGetUtilizationRates, handle)
    ecc = call(nvml.nvmlDeviceGetEccMode, handle)
    mig = call(nvml.nvmlDeviceGetMigMode, handle)
    return GpuFacts(
        name=None if name is None else _str(name),
        pci_device_id=pci.pciDeviceId,
        memory_total_bytes=None if memory is None else memory[0],
        memory_used_bytes=None if memory is None else memory[1],
        temperature_c=_number(
            call(nvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
        ),
        power_w=_watts(call(nvml.nvmlDeviceGetPowerUsage, handle)),
        power_limit_w=_watts(call(nvml.nvmlDeviceGetPowerManagementLimit, handle)),
        sm_clock_mhz=_number(call(nvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)),
        mem_clock_mhz=_number(call(nvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM)),
        gpu_util_pct=None if utilization is None else float(utilization.gpu),
        mem_util_pct=None if utilization is None else float(utilization.memory),
        ecc_enabled=None if ecc is None else bool(ecc[0]),
        mig_enabled=None if mig is None else bool(mig[0]),
    )


def _memory(nvml: Any, call: _Calls, handle: Any) -> tuple[int, int] | None:
    """(total, used) as the driver splits the board, read off the struct with no arithmetic.

    v2 divides the board into used + free + reserved, and its `used` is what nvidia-smi prints
    as "Used" and DCGM publishes as FB_USED. A driver before R510 has only v1, whose `used`
    counts the reservation too; on such a driver nvidia-smi and DCGM show that figure, so it is
    the right reference there as well.
    """
    try:
        memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLLibraryMismatchError):
        memory = call(nvml.nvmlDeviceGetMemoryInfo, handle)
    except pynvml.NVMLError as err:
        call.support.setdefault("nvmlDeviceGetMemoryInfo", error_name(err))
        return None
    else:
        call.support["nvmlDeviceGetMemoryInfo"] = "ok"
    return None if memory is None else (int(memory.total), int(memory.used))


def _str(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _number(value: int | None) -> float | None:
    return None if value is None else float(value)


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000


@dataclass(frozen=True, slots=True)
class GpuProcesses:
    """What NVML lists on one GPU: pid -> device memory in bytes (None: NVML has no figure)."""

    uuid: str | None
    memory_by_pid: dict[int, int | None]
    # The error name when the GPU refused the list (a MIG-enabled parent to an unprivileged
    # caller answers NO_PERMISSION); memory_by_pid is then empty.
    error: str | None = None


def nvml_processes(nvml: Any) -> dict[str, GpuProcesses]:
    """Compute and graphics processes of every GPU, keyed by `bus_id_key`; NVML must already be
    initialised. A process in both lists is counted once: it is one address space."""
    listed: dict[str, GpuProcesses] = {}
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        key = bus_id_key(_str(nvml.nvmlDeviceGetPciInfo(handle).busId))
        uuid = _uuid(nvml, handle)
        try:
            rows = [
                *nvml.nvmlDeviceGetComputeRunningProcesses(handle),
                *nvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
            ]
        except pynvml.NVMLError as err:
            listed[key] = GpuProcesses(uuid, {}, error_name(err))
            continue
        memory: dict[int, int | None] = {}
        for row in rows:
            used = None if row.usedGpuMemory is None else int(row.usedGpuMemory)
            previous = memory.get(int(row.pid))
            memory[int(row.pid)] = used if previous is None else max(previous, used or 0)
        listed[key] = GpuProcesses(uuid, memory)
    return listed


def _uuid(nvml: Any, handle: Any) -> str | None:
    """Only to join the exporter's per-GPU rows, which carry the UUID and no bus id; it is
    never written anywhere."""
    try:
        return _str(nvml.nvmlDeviceGetUUID(handle))
    except pynvml.NVMLError:
        return None
