"""A simulated NVML, handed to the poller as an object: `FakeNvml(fleet).api` has one attribute per
`nvml*` function of nvidia-ml-py, and `source()` wraps it in the NvmlSource a Poller takes.
Nothing in `pynvml` is replaced.

Everything it returns or raises is a real nvidia-ml-py object: `c_nvmlMemory_t`,
`c_nvmlFieldValue_t` arrays, `c_nvmlEventData_t`, ctypes device handles, and the generated
`NVMLError_*` classes. Any `nvml*` function not modelled raises NOT_SUPPORTED, so the real
library is never loaded.

The NVML areas live in `kube_gpu_exporter/exporter/simulator/nvml/` (devices, sensors, reliability,
fields, MIG, GPM, processes, events), each a mixin over `nvml/core.py`; `nvml/api.py` builds the
object. This module composes them and adds what tests and `--simulate`'s control API do to the node.

Fidelity notes (docs/nvml.md, from 'NOT_SUPPORTED matrix' on): NOT_SUPPORTED matrix for MIG
parents, MIG device handles and older boards; FunctionNotFound by driver version; GI ids by
placement; MIG names "<parent> MIG <profile>"; units mW, mJ, bytes, MHz, KB/s. GPU-instance
handles and their info (placement, driver profile id) only for a privileged fleet
(`nvml_privileged`); NO_PERMISSION otherwise. Process lists and per-process utilization come from
the node's process table (`processes`, see docs/nvml.md, 'Process accounting').
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.nvml.source import NvmlSource
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec
from kube_gpu_exporter.exporter.simulator.nvml.api import Layer, build_api
from kube_gpu_exporter.exporter.simulator.nvml.core import NO_INSTANCE
from kube_gpu_exporter.exporter.simulator.nvml.devices import DeviceCalls
from kube_gpu_exporter.exporter.simulator.nvml.events import EventCalls
from kube_gpu_exporter.exporter.simulator.nvml.field_models import ModelledGetters
from kube_gpu_exporter.exporter.simulator.nvml.fields import FieldCalls
from kube_gpu_exporter.exporter.simulator.nvml.gpm import GpmCalls
from kube_gpu_exporter.exporter.simulator.nvml.mig import MigCalls
from kube_gpu_exporter.exporter.simulator.nvml.nvlink_fields import FabricCalls
from kube_gpu_exporter.exporter.simulator.nvml.pcie_link import PcieLinkCalls
from kube_gpu_exporter.exporter.simulator.nvml.processes import ProcessCalls
from kube_gpu_exporter.exporter.simulator.nvml.reliability import ReliabilityCalls
from kube_gpu_exporter.exporter.simulator.nvml.sensors import SensorCalls
from kube_gpu_exporter.exporter.simulator.sim_gpu import MIB, SimGpu
from kube_gpu_exporter.exporter.simulator.workload import SHAPES


class FakeNvml(
    DeviceCalls,
    SensorCalls,
    ModelledGetters,
    ReliabilityCalls,
    FieldCalls,
    FabricCalls,
    PcieLinkCalls,
    MigCalls,
    GpmCalls,
    EventCalls,
    ProcessCalls,
):
    def __init__(self, fleet: FleetSpec, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(fleet, clock)
        # Built once: the poller's calls then cost one attribute lookup on a plain object.
        self.api = build_api(self)

    def source(self, **settings: Any) -> NvmlSource:
        """The NvmlSource a Poller takes, over `api`; `settings` are NvmlSource's other fields."""
        return NvmlSource(self.api, **settings)

    def layered_api(self, layer: Layer) -> Any:
        """Another api object over the same simulated node, with `layer` between each modelled
        call and its charge (the benchmarks' replay of remembered answers)."""
        return build_api(self, layer)

    def close(self) -> None:
        """The simulated node goes away as its driver would: injected faults are cleared (a hung
        call returns), every later call fails, and a thread waiting for events wakes to an error
        instead of waiting out its timeout."""
        self.faults.clear()
        self.unload_driver()

    def __enter__(self) -> FakeNvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- Control API for tests and --simulate fault injection (not part of NVML) ----

    def lose_gpu(self, index: int) -> None:
        self.gpus[index].lost = True
        self._wake_for_lost(index)

    def restore_gpu(self, index: int) -> None:
        self.gpus[index].lost = False

    def unload_driver(self) -> None:
        """The driver goes away: every call fails as if NVML were never initialised, and the
        event sets and GPM buffers it held are gone."""
        self.driver_loaded = False
        with self._init_lock:
            self._init_count = 0
        self._drop_gpm_samples()
        self._destroy_event_sets()

    def load_driver(self) -> None:
        self.driver_loaded = True

    def inject_xid(self, index: int, xid: int, gpu_instance_id: int | None = None) -> None:
        self._emit(index, pynvml.nvmlEventTypeXidCriticalError, xid, gpu_instance_id)

    def inject_nvlink_errors(self, index: int, kind: str, link: int, count: int) -> None:
        """Add `count` to one link's counter of `kind` (nvlink_health.KINDS)."""
        gpu = self.gpus[index]
        with gpu.lock:
            gpu.nvlink_health.burst(kind, link, count)

    def set_fabric(
        self, index: int, state: int | None = None, health_mask: int | None = None
    ) -> None:
        """Move a registered GPU's fabric probe state and health mask (None: leave it)."""
        gpu = self.gpus[index]
        fabric = gpu.nvlink_health.fabric
        if fabric is None:
            raise ValueError(f"GPU {index} has no NVLink fabric")
        with gpu.lock:
            if state is not None:
                fabric.state = state
            if health_mask is not None:
                fabric.health_mask = health_mask

    def set_recovery_action(self, index: int, action: int) -> None:
        gpu = self.gpus[index]
        with gpu.lock:
            gpu.nvlink_health.recovery_action = action

    def inject_ecc_error(self, index: int, double_bit: bool = True, count: int = 1) -> None:
        gpu = self.gpus[index]
        with gpu.lock:
            if double_bit:
                gpu.ecc_dbe_volatile += count
                if gpu.model.row_remapping:
                    gpu.remapped_uncorrectable += count
                    gpu.remapped_pending = 1
                else:
                    # Before Ampere the driver retires the page instead (pending until reset).
                    for _ in range(count):
                        self._retire(gpu, "dbe")
            else:
                gpu.ecc_sbe_volatile += count
        kind = (
            pynvml.nvmlEventTypeDoubleBitEccError
            if double_bit
            else pynvml.nvmlEventTypeSingleBitEccError
        )
        self._emit(index, kind, 0, None)

    def retire_page(self, index: int, cause: str) -> int:
        """Retire one more page of a pre-Ampere board (the T4 model) for `cause`: "sbe"
        (NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS) or "dbe" (..._DOUBLE_BIT_
        ECC_ERROR). The page counts in DCGM_FI_DEV_RETIRED_SBE/_DBE at once and is pending
        (DCGM_FI_DEV_RETIRED_PENDING = 1) until reset_gpu(), as NVML counts pending pages with
        the retired ones. Returns the page's address. ValueError for an unknown cause or a board
        that remaps rows instead (Ampere and newer, which answer NOT_SUPPORTED for retired
        pages); no event is emitted (inject_ecc_error emits the ECC one and retires a page).
        """
        if cause not in ("sbe", "dbe"):
            raise ValueError(f"unknown page retirement cause {cause!r} (known: sbe, dbe)")
        gpu = self.gpus[index]
        if gpu.model.row_remapping:
            raise ValueError(f"GPU {index} ({gpu.model.name}) remaps rows; it retires no pages")
        with gpu.lock:
            return self._retire(gpu, cause)

    @staticmethod
    def _retire(gpu: SimGpu, cause: str) -> int:
        pages = gpu.retired_pages[cause]
        # A distinct, stable 4 KiB-aligned address per page (what XID 63 would name).
        address = ((gpu.index + 1) << 32) | (
            (len(gpu.retired_pages["sbe"]) + len(gpu.retired_pages["dbe"]) + 1) << 12
        )
        pages.append(address)
        gpu.retired_pending = 1
        return address

    def set_clock_event_override(self, index: int, bits: int | None) -> None:
        """Force clock-event reason bits on for GPU `index` from now on (NVML's
        nvmlClocksEventReason* / nvmlClocksThrottleReason* bits, e.g. 0x40 HW thermal slowdown
        for a thermal brake, 0x4 SW power cap), ORed into the reasons the board's own state
        gives; None clears the override. nvmlDeviceGetCurrentClocksEventReasons reports them,
        a thermal or power brake cuts the SM clock, and the violation counters
        (DCGM_FI_DEV_*_VIOLATION) of the policies they belong to rise by the simulated time
        they stay on (kube_gpu_exporter/exporter/simulator/violations.py)."""
        gpu = self.gpus[index]
        gpu.set_clock_event_override(self.now(), bits)

    def set_temperature_offset(self, index: int, celsius: float) -> None:
        self.gpus[index].temperature_offset_c = celsius

    def glitch_power(self, index: int, milliwatts: int, seconds: float) -> None:
        """Board power reads `milliwatts` for the next `seconds` of simulated time, whatever the
        board draws; its energy counter goes on counting the real draw."""
        now = self.now()
        self.gpus[index].power_glitch = (milliwatts, now, now + seconds)

    def glitch_gpm(
        self, index: int, value: float, seconds: float, gpu_instance_id: int | None = None
    ) -> None:
        """Every GPM metric of the board (or of one MIG GPU instance) reads `value` (+Inf, NaN)
        for samples taken in the next `seconds` of simulated time."""
        now = self.now()
        self.gpus[index].gpm_glitches[gpu_instance_id] = (value, now, now + seconds)

    def set_workload(self, index: int, workload: str) -> None:
        """Switch a GPU's activity (e.g. to "idle": its pod stops using it). Pods stay put."""
        if workload not in SHAPES:
            raise ValueError(f"unknown workload {workload!r} (known: {', '.join(SHAPES)})")
        gpu = self.gpus[index]
        with gpu.lock:
            gpu.workload, gpu.shape = workload, SHAPES[workload]

    def reset_gpu(self, index: int) -> None:
        """`nvidia-smi --gpu-reset`: volatile ECC counts and NVLink data counters start over, a
        pending row remap or page retirement is applied, and a lost GPU answers again. Aggregate
        counts, retired pages and remap failures persist."""
        gpu = self.gpus[index]
        with gpu.lock:
            gpu.ecc_sbe_history += gpu.ecc_sbe_volatile
            gpu.ecc_dbe_history += gpu.ecc_dbe_volatile
            gpu.ecc_sbe_volatile = gpu.ecc_dbe_volatile = 0
            gpu.remapped_pending = 0
            gpu.retired_pending = 0
            gpu.lost = False
        gpu.reset_nvlink_counters(self.now())

    def memory_bytes(self, index: int) -> tuple[int, int, int, int]:
        return self.gpus[index].memory(self.now())

    def set_row_remap(self, index: int, pending: bool, failure: bool) -> None:
        """A row remap waiting for a reset, and a remap that failed (which no reset undoes)."""
        gpu = self.gpus[index]
        with gpu.lock:
            gpu.remapped_pending = int(pending)
            gpu.remapped_failure = int(failure)


__all__ = ["MIB", "NO_INSTANCE", "FakeNvml"]
