"""The health verdict of every GPU of a snapshot: a pure function of the snapshot, applying the
reason table (reasons.py). A reason holds only while its evidence does, and a GPU with none
holds HEALTHY, so "healthy" is stated rather than implied by an absence. MIG instances carry
their board's verdict: every fault in the table is the board's, and an XID raised for one GPU
instance counts for the board too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kube_gpu_exporter.exporter import fabric_health
from kube_gpu_exporter.exporter.fields.nvlink_health_rows import FABRIC_HEALTH_MASK, FABRIC_STATUS
from kube_gpu_exporter.exporter.fields.pcie_link_rows import (
    PCIE_LINK_GEN,
    PCIE_LINK_WIDTH,
    PCIE_MAX_LINK_GEN,
    PCIE_MAX_LINK_WIDTH,
)
from kube_gpu_exporter.exporter.health.reasons import (
    BY_NAME,
    HEALTHY,
    RECOVERY_REASONS,
    XID_HOLD_SECONDS,
    Reason,
    worse,
    xid_reason,
)
from kube_gpu_exporter.exporter.snapshot import GpuReadings, GpuSnapshot, NodeSnapshot

RECOVERY_ACTION = "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"
ECC_DBE_VOLATILE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ROW_REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
# Answered by boards that retire pages (Turing and older); the others refuse it.
RETIRED_PENDING = "DCGM_FI_DEV_RETIRED_PENDING"
# The rows the verdict needs whether or not a --collectors file lists them (device_reader
# reads them always; the exposition still writes only the listed families).
INPUT_FIELDS = frozenset(
    {
        RECOVERY_ACTION,
        FABRIC_STATUS,
        FABRIC_HEALTH_MASK,
        RETIRED_PENDING,
        PCIE_LINK_GEN,
        PCIE_LINK_WIDTH,
        PCIE_MAX_LINK_GEN,
        PCIE_MAX_LINK_WIDTH,
    }
)
FABRIC_COMPLETED_WITH_ERROR = 4
# nvmlClocksEventReasonGpuIdle: nothing runs on the GPU.
GPU_IDLE = 0x1

# Clock-event reason bits (nvmlClocksEventReason*) -> reason.
_CLOCK_EVENT_REASONS = ((0x8, "hw_slowdown"), (0x40, "thermal_brake"), (0x80, "power_brake"))
_DEGRADED = ("degraded_bandwidth", "route_recovery", "access_timeout_recovery")
_UNHEALTHY = ("route_unhealthy", "incorrect_configuration")


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    gpu: GpuSnapshot
    # The reasons that hold, worst first; (HEALTHY,) when none does.
    reasons: tuple[Reason, ...]

    @property
    def worst(self) -> Reason:
        return self.reasons[0]


def verdicts(snapshot: NodeSnapshot) -> tuple[GpuVerdict, ...]:
    """One verdict per GPU of the snapshot, in its order."""
    return tuple(verdict(gpu, snapshot.monotonic_at) for gpu in snapshot.gpus)


def verdict(gpu: GpuSnapshot, now: float) -> GpuVerdict:
    held: list[Reason] = []
    for reason in _reasons(gpu, now):
        if reason not in held:
            held.append(reason)
    # A stable sort, worst first: ties keep the table's order.
    ordered: list[Reason] = []
    for reason in held:
        at = next((i for i, r in enumerate(ordered) if worse(reason, r)), len(ordered))
        ordered.insert(at, reason)
    return GpuVerdict(gpu, tuple(ordered) or (HEALTHY,))


def _reasons(gpu: GpuSnapshot, now: float) -> Iterator[Reason]:
    if not gpu.up:
        # A read that timed out (stale) says nothing of the board; any other failure of a device
        # NVML listed is a lost GPU (GPU_IS_LOST, or an error standing in for it).
        if not gpu.stale:
            yield BY_NAME["gpu_lost"]
        return
    if gpu.readings is not None:
        yield from _reading_reasons(gpu.readings)
    yield from _xid_reasons(gpu, now)


def _reading_reasons(r: GpuReadings) -> Iterator[Reason]:
    values = r.values
    action = values.get(RECOVERY_ACTION)
    if action is not None and int(action) in RECOVERY_REASONS:
        yield RECOVERY_REASONS[int(action)]
    if values.get(ECC_DBE_VOLATILE):
        yield BY_NAME["ecc_dbe_volatile"]
    if values.get(ROW_REMAP_PENDING):
        yield BY_NAME["row_remap_pending"]
    if values.get(ROW_REMAP_FAILURE):
        yield BY_NAME["row_remap_failure"]
    if values.get(RETIRED_PENDING):
        yield BY_NAME["retired_pages_pending"]
    mask = values.get(FABRIC_HEALTH_MASK)
    if mask is not None:
        if any(fabric_health.BY_NAME[n].holds(int(mask)) for n in _UNHEALTHY):
            yield BY_NAME["fabric_unhealthy"]
        if any(fabric_health.BY_NAME[n].holds(int(mask)) for n in _DEGRADED):
            yield BY_NAME["fabric_degraded"]
    if values.get(FABRIC_STATUS) == FABRIC_COMPLETED_WITH_ERROR:
        yield BY_NAME["fabric_registration_failed"]
    if _below(r, PCIE_LINK_WIDTH, PCIE_MAX_LINK_WIDTH) or (
        _busy(r) and _below(r, PCIE_LINK_GEN, PCIE_MAX_LINK_GEN)
    ):
        yield BY_NAME["pcie_downtrained"]
    if r.clock_event_reasons is not None:
        for bit, name in _CLOCK_EVENT_REASONS:
            if r.clock_event_reasons & bit:
                yield BY_NAME[name]


def _busy(r: GpuReadings) -> bool:
    """Whether the board is working, so its PCIe generation means something. An idle board
    drops its link to a lower generation to save power (dynamic link speed, ASPM) and trains
    back up when work arrives, so a low generation on an idle board is no fault; the width does
    not change with load, so it is compared always. NVML says idle through the GpuIdle
    clock-event reason; unknown reasons count as idle (no verdict from a guess)."""
    return r.clock_event_reasons is not None and not r.clock_event_reasons & GPU_IDLE


def _below(r: GpuReadings, current: str, maximum: str) -> bool:
    now, best = r.values.get(current), r.values.get(maximum)
    # A link that reads 0 is one NVML could not measure (a board in a low-power state), not one
    # trained at nothing.
    return now is not None and best is not None and 0 < now < best


def _xid_reasons(gpu: GpuSnapshot, now: float) -> Iterator[Reason]:
    records = (gpu.xid, *(record for _, record in gpu.instance_xids))
    codes = sorted(
        {code for record in records for code, at in record.last_seen if now - at < XID_HOLD_SECONDS}
    )
    for code in codes:
        yield xid_reason(code)
