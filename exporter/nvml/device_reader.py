"""Reads one GPU: its identity once, then its board-level values every sweep.

Every value NVML has a field id for (ECC, energy, PCIe replays, NVLink, row remapping, memory
temperature, board power) is fetched in a single `nvmlDeviceGetFieldValues` batch per GPU,
checking each entry's own return code. Everything else uses the plain getters.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.nvml.guarded_calls import GuardedNvml, alt
from exporter.snapshot import GpuIdentity, GpuReadings

# NVML field id -> GpuReadings attribute, for the batched counters.
BATCHED_FIELDS: dict[int, str] = {
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: "ecc_sbe_volatile",
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: "ecc_dbe_volatile",
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: "ecc_sbe_aggregate",
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: "ecc_dbe_aggregate",
    pynvml.NVML_FI_DEV_MEMORY_TEMP: "memory_temperature_c",
    pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: "energy_mj",
    pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: "pcie_replay_count",
    pynvml.NVML_FI_DEV_REMAPPED_COR: "remapped_rows_correctable",
    pynvml.NVML_FI_DEV_REMAPPED_UNC: "remapped_rows_uncorrectable",
    pynvml.NVML_FI_DEV_REMAPPED_PENDING: "remapped_rows_pending",
    pynvml.NVML_FI_DEV_REMAPPED_FAILURE: "remapped_rows_failure",
}
# Board power as nvmlDeviceGetPowerUsage reports it: the 1 s average on Ampere (GA100 excepted)
# and newer, the instantaneous draw on the others (docs/nvml.md, 'Power fields'). The batch asks
# for both and takes the average where the GPU has one; the getter stays the fallback for a
# driver that knows neither field.
POWER_AVERAGE = getattr(pynvml, "NVML_FI_DEV_POWER_AVERAGE", 185)
POWER_INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)
_POWER_FIELDS: dict[int, str] = {POWER_AVERAGE: "_power_average", POWER_INSTANT: "_power_instant"}
NVLINK_FIELDS: dict[int, str] = {
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: "nvlink_tx_kib",
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: "nvlink_rx_kib",
}
_UNION_MEMBER = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


_REFUSED = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT)


def field_value(entry: Any) -> int | float | None:
    """The value of one `c_nvmlFieldValue_t`, or None if NVML filled it with an error."""
    if entry.nvmlReturn != pynvml.NVML_SUCCESS:
        return None
    member = _UNION_MEMBER.get(entry.valueType)
    return getattr(entry.value, member) if member else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class _FieldPlan:
    """Which batched fields are worth asking this device for; shrinks as NVML says no."""

    request: list[int | tuple[int, int]]
    attributes: list[str]


class DeviceReader:
    def __init__(self, nvml: GuardedNvml, field_values_lock: threading.Lock) -> None:
        self._nvml = nvml
        # Serialised as DataDog does after an incident (datadog-agent #54821).
        self._field_values_lock = field_values_lock
        self._plans: dict[str, _FieldPlan] = {}
        self._plans_lock = threading.Lock()

    def read_identity(self, index: int, handle: Any) -> GpuIdentity:
        raw = self._nvml.raw
        uuid = _text(raw("nvmlDeviceGetUUID", handle))
        name = _text(raw("nvmlDeviceGetName", handle))
        pci = raw("nvmlDeviceGetPciInfo", handle)
        mig = self._nvml.call(uuid, "mig_mode", "nvmlDeviceGetMigMode", handle)
        return GpuIdentity(
            index=index,
            uuid=uuid,
            name=name,
            pci_bus_id=_text(pci.busId),
            mig_enabled=None if mig is None else bool(mig[0]),
            mig_pending=None if mig is None else bool(mig[1]),
        )

    def read_board(self, identity: GpuIdentity, handle: Any) -> GpuReadings:
        uuid = identity.uuid
        call = self._nvml.call
        mig_parent = bool(identity.mig_enabled)
        values: dict[str, Any] = {}

        values["temperature_c"] = call(
            uuid, "temperature", "nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU
        )
        # Utilization, encoder and decoder are documented NOT_SUPPORTED on a MIG-enabled parent, and
        # its framebuffer is reported per instance. Skip them by rule rather than memoising, since
        # MIG mode can be switched off again.
        if not mig_parent:
            util = call(uuid, "utilization", "nvmlDeviceGetUtilizationRates", handle)
            if util is not None:
                values["gpu_util_pct"] = util.gpu
                values["mem_copy_util_pct"] = util.memory
            enc = call(uuid, "encoder", "nvmlDeviceGetEncoderUtilization", handle)
            values["encoder_util_pct"] = None if enc is None else enc[0]
            dec = call(uuid, "decoder", "nvmlDeviceGetDecoderUtilization", handle)
            values["decoder_util_pct"] = None if dec is None else dec[0]
            values.update(self._memory(uuid, handle))
        values["power_limit_mw"] = call(
            uuid, "power_limit", "nvmlDeviceGetPowerManagementLimit", handle
        )
        values["enforced_power_limit_mw"] = call(
            uuid, "enforced_power_limit", "nvmlDeviceGetEnforcedPowerLimit", handle
        )
        values["sm_clock_mhz"] = call(
            uuid, "sm_clock", "nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_SM
        )
        values["mem_clock_mhz"] = call(
            uuid, "mem_clock", "nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_MEM
        )
        values["clock_event_reasons"] = self._nvml.first_available(
            uuid,
            "clock_events",
            [
                alt("nvmlDeviceGetCurrentClocksEventReasons", handle),
                alt("nvmlDeviceGetCurrentClocksThrottleReasons", handle),
            ],
        )
        batched = self._batched(uuid, handle)
        average, instant = (batched.pop(a, None) for a in _POWER_FIELDS.values())
        power = average if average is not None else instant
        if power is None:
            power = call(uuid, "power", "nvmlDeviceGetPowerUsage", handle)
        values["power_mw"] = power
        values.update(batched)
        return GpuReadings(**{k: v for k, v in values.items() if v is not None})

    def _memory(self, uuid: str, handle: Any) -> dict[str, int]:
        mem = self._nvml.first_available(
            uuid,
            "memory",
            [
                alt("nvmlDeviceGetMemoryInfo", handle, version=pynvml.nvmlMemory_v2),
                alt("nvmlDeviceGetMemoryInfo", handle),
            ],
        )
        return memory_values(mem)

    def _batched(self, uuid: str, handle: Any) -> dict[str, int | float]:
        plan = self._plan(uuid, handle)
        if not plan.request:
            return {}
        with self._field_values_lock:
            entries = self._nvml.call(
                uuid, "field_values", "nvmlDeviceGetFieldValues", handle, plan.request
            )
        if entries is None:
            return {}
        out: dict[str, int | float] = {}
        refused: list[int] = []
        for position, (entry, attribute) in enumerate(zip(entries, plan.attributes, strict=True)):
            value = field_value(entry)
            if value is None:
                if entry.nvmlReturn in _REFUSED:
                    refused.append(position)
                continue
            # NVLink counters come per link; everything else once.
            out[attribute] = out.get(attribute, 0) + value
        if refused:
            self._drop_from_plan(uuid, refused)
        return out

    def _plan(self, uuid: str, handle: Any) -> _FieldPlan:
        with self._plans_lock:
            plan = self._plans.get(uuid)
        if plan is not None:
            return plan
        fields = {**BATCHED_FIELDS, **_POWER_FIELDS}
        request: list[int | tuple[int, int]] = list(fields)
        attributes = list(fields.values())
        for link in range(self._nvlink_count(uuid, handle)):
            for field_id, attribute in NVLINK_FIELDS.items():
                request.append((field_id, link))
                attributes.append(attribute)
        plan = _FieldPlan(request, attributes)
        with self._plans_lock:
            self._plans[uuid] = plan
        return plan

    def _nvlink_count(self, uuid: str, handle: Any) -> int:
        with self._field_values_lock:
            entries = self._nvml.call(
                uuid,
                "nvlink_count",
                "nvmlDeviceGetFieldValues",
                handle,
                [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT],
            )
        if not entries:
            return 0
        count = field_value(entries[0])
        return int(count) if count else 0

    def _drop_from_plan(self, uuid: str, positions: list[int]) -> None:
        with self._plans_lock:
            plan = self._plans.get(uuid)
            if plan is None:
                return
            keep = [i for i in range(len(plan.request)) if i not in set(positions)]
            self._plans[uuid] = _FieldPlan(
                [plan.request[i] for i in keep], [plan.attributes[i] for i in keep]
            )

    def forget(self, uuid: str) -> None:
        with self._plans_lock:
            self._plans.pop(uuid, None)


def memory_values(mem: Any) -> dict[str, int]:
    """Framebuffer figures with dcgm-exporter's meaning: used excludes the driver's reservation.

    nvmlMemory_v2 counts the reservation inside `used`; v1 has no reservation field at all.
    """
    if mem is None:
        return {}
    reserved = getattr(mem, "reserved", None)
    if reserved is None:
        return {"fb_total_bytes": mem.total, "fb_used_bytes": mem.used, "fb_free_bytes": mem.free}
    return {
        "fb_total_bytes": mem.total,
        "fb_used_bytes": max(0, mem.used - reserved),
        "fb_free_bytes": mem.free,
        "fb_reserved_bytes": reserved,
    }
