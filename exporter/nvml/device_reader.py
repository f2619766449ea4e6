"""Reads one GPU: its identity once, then its board-level values every sweep.

Every value NVML has a field id for (ECC, energy, PCIe replays, NVLink, row remapping, memory
temperature, board power) is fetched in a single `nvmlDeviceGetFieldValues` batch per GPU,
checking each entry's own return code. The slow fields among them (SLOW_FIELDS: costly counters
and rarely changing ones) join the batch only when scrape_cadence.py says they are due; in between,
their last values stand, except the energy counter, which board power carries forward between
rarer reads (energy_estimate.py). Everything else uses the plain getters. The vGPU licence state
changes on the scale of minutes, so it is read with the identity, not every sweep.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from exporter.nvml.energy_estimate import EnergyEstimates
from exporter.nvml.guarded_calls import GuardedNvml, alt
from exporter.nvml.nvlink_rate import NvlinkRate, NvlinkSample
from exporter.nvml.struct_views import view
from exporter.scrape_cadence import ScrapeCadence
from exporter.snapshot import GpuIdentity, GpuReadings

# NVML field id -> GpuReadings attribute, for the fields read at the slow fields' cadence
# (scrape_cadence.py): the energy counter (4 ms of CPU per read on an H200), the PCIe replay counter
# (150 µs), and ECC totals and row remapping, which change on the scale of hours.
SLOW_FIELDS: dict[int, str] = {
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: "ecc_sbe_volatile",
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: "ecc_dbe_volatile",
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: "ecc_sbe_aggregate",
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: "ecc_dbe_aggregate",
    pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: "energy_mj",
    pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: "pcie_replay_count",
    pynvml.NVML_FI_DEV_REMAPPED_COR: "remapped_rows_correctable",
    pynvml.NVML_FI_DEV_REMAPPED_UNC: "remapped_rows_uncorrectable",
    pynvml.NVML_FI_DEV_REMAPPED_PENDING: "remapped_rows_pending",
    pynvml.NVML_FI_DEV_REMAPPED_FAILURE: "remapped_rows_failure",
}
# NVML field id -> GpuReadings attribute, for every single-scope field the batch carries.
BATCHED_FIELDS: dict[int, str] = {
    pynvml.NVML_FI_DEV_MEMORY_TEMP: "memory_temperature_c",
    **SLOW_FIELDS,
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
    """The value of one `c_nvmlFieldValue_t` (or a view of one), or None if NVML filled it with
    an error."""
    if entry.nvmlReturn != pynvml.NVML_SUCCESS:
        return None
    member = _UNION_MEMBER.get(entry.valueType)
    return getattr(entry.value, member) if member else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_NVLINK_ATTRIBUTES = frozenset(NVLINK_FIELDS.values())


# The batch's entries at the slow cadence: SLOW_FIELDS and the per-link NVLink counters (on an
# 18-link GPU 36 entries, about 10 µs each on an H200); their rate is then the average since the
# previous read, normally the time between two scrapes.
_SLOW_ATTRIBUTES = frozenset(SLOW_FIELDS.values()) | _NVLINK_ATTRIBUTES
# What a read without the slow fields takes from the last read with them.
_KEPT = _SLOW_ATTRIBUTES | {"nvlink_kib_per_second", "power_limit_mw"}
ENERGY_ATTRIBUTE = SLOW_FIELDS[pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]
FieldRequest = int | tuple[int, int]


@dataclass
class _FieldPlan:
    """Which batched fields are worth asking this device for; shrinks as NVML says no."""

    request: list[FieldRequest]
    attributes: list[str]
    # Per position, whether it is a per-link NVLink counter (worked out once, not per sweep).
    nvlink: list[bool] = field(init=False)

    def __post_init__(self) -> None:
        self.nvlink = [attribute in _NVLINK_ATTRIBUTES for attribute in self.attributes]

    def without(self, refused: set[FieldRequest]) -> _FieldPlan:
        keep = [i for i, entry in enumerate(self.request) if entry not in refused]
        return _FieldPlan([self.request[i] for i in keep], [self.attributes[i] for i in keep])


@dataclass
class _FieldPlans:
    """A device's batch with its slow fields (`full`), with them but without the energy counter
    (`slow`), and without any (`fast`)."""

    full: _FieldPlan
    slow: _FieldPlan = field(init=False)
    fast: _FieldPlan = field(init=False)

    def __post_init__(self) -> None:
        pairs = list(zip(self.full.request, self.full.attributes, strict=True))
        self.slow = self.full.without({e for e, a in pairs if a == ENERGY_ATTRIBUTE})
        self.fast = self.full.without({e for e, a in pairs if a in _SLOW_ATTRIBUTES})

    def pick(self, with_slow: bool, with_energy: bool) -> _FieldPlan:
        if not with_slow:
            return self.fast
        return self.full if with_energy else self.slow


@dataclass
class _Batch:
    """One field-value batch: summed values, and what the NVLink rate needs from it."""

    values: dict[str, int | float] = field(default_factory=dict)
    # False: the call as a whole failed, so nothing in it counts as read.
    answered: bool = True
    nvlink_ok: int = 0
    nvlink_failed: int = 0
    nvlink_timestamp_us: int = 0


class DeviceReader:
    def __init__(
        self,
        nvml: GuardedNvml,
        field_values_lock: threading.Lock,
        slow_fields: ScrapeCadence | None = None,
        energy: EnergyEstimates | None = None,
    ) -> None:
        self._nvml = nvml
        # Serialised as DataDog does after an incident (datadog-agent #54821).
        self._field_values_lock = field_values_lock
        # None: the slow fields are read with every sweep.
        self._slow_cadence = slow_fields
        # None: the energy counter is read with the other slow fields, and stands in between.
        self._energy = energy
        self._plans: dict[str, _FieldPlans] = {}
        # UUID -> the slow fields' values as last read, standing until the next read.
        self._slow_values: dict[str, dict[str, int | float]] = {}
        # Guards the plans and the per-UUID tables, which the device workers and the sweep share.
        self._plans_lock = threading.Lock()
        self._nvlink_rate = NvlinkRate()
        # UUID -> DCGM's VGPU_LICENSE_STATUS as of the last identity read (None: NVML failed).
        self._licence: dict[str, int | None] = {}

    def read_identity(self, index: int, handle: Any) -> GpuIdentity:
        raw = self._nvml.raw
        uuid = _text(raw("nvmlDeviceGetUUID", handle))
        name = _text(raw("nvmlDeviceGetName", handle))
        pci = raw("nvmlDeviceGetPciInfo", handle)
        mig = self._nvml.call(uuid, "mig_mode", "nvmlDeviceGetMigMode", handle)
        licence = self._vgpu_licence(uuid, handle)
        minor = self._nvml.call(uuid, "minor_number", "nvmlDeviceGetMinorNumber", handle)
        with self._plans_lock:
            self._licence[uuid] = licence
        return GpuIdentity(
            index=index,
            uuid=uuid,
            name=name,
            pci_bus_id=_text(pci.busId),
            mig_enabled=None if mig is None else bool(mig[0]),
            mig_pending=None if mig is None else bool(mig[1]),
            minor_number=None if minor is None else int(minor),
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
        with_slow = self._slow_due(uuid)
        if with_slow:
            # A setting, not a reading, and 85 µs a call on an H200: at the slow fields' cadence.
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
        with_energy = with_slow and (self._energy is None or self._energy.read_due(uuid))
        batch = self._batched(uuid, handle, with_slow, with_energy)
        batched = batch.values
        average, instant = (batched.pop(a, None) for a in _POWER_FIELDS.values())
        power = average if average is not None else instant
        if power is None:
            power = call(uuid, "power", "nvmlDeviceGetPowerUsage", handle)
        values["power_mw"] = power
        if batch.nvlink_failed:
            # A sum over only some links would look like a counter going backwards.
            for attribute in _NVLINK_ATTRIBUTES:
                batched.pop(attribute, None)
        elif batch.nvlink_ok:
            values["nvlink_kib_per_second"] = self._nvlink_rate.update(
                uuid,
                NvlinkSample(
                    total_kib=int(
                        batched.get("nvlink_tx_kib", 0) + batched.get("nvlink_rx_kib", 0)
                    ),
                    counters=batch.nvlink_ok,
                    timestamp_us=batch.nvlink_timestamp_us,
                    monotonic_s=time.monotonic(),
                ),
            )
        energy_read = batched.pop(ENERGY_ATTRIBUTE, None) if self._energy is not None else None
        values.update(batched)
        self._keep_slow(uuid, values, with_slow and batch.answered)
        if self._energy is not None:
            # An unsigned long long field: int already, but the batch types all its values alike.
            counter_mj = None if energy_read is None else int(energy_read)
            values[ENERGY_ATTRIBUTE] = self._energy.update(uuid, power, counter_mj)
        with self._plans_lock:
            values["vgpu_license_status"] = self._licence.get(uuid)
        return GpuReadings(**{k: v for k, v in values.items() if v is not None})

    def _vgpu_licence(self, uuid: str, handle: Any) -> int | None:
        """DCGM's VGPU_LICENSE_STATUS (docs/nvml.md, 'vGPU licence'): 0 where the GPU has no
        licensing (bare metal), else whether the vGPU feature is licensed; None on an error."""
        features = self._nvml.call(
            uuid, "vgpu_licence", "nvmlDeviceGetGridLicensableFeatures_v4", handle
        )
        if features is None:
            return None
        if not features.isGridLicenseSupported:
            return 0
        count = min(features.licensableFeaturesCount, len(features.gridLicensableFeatures))
        for feature in features.gridLicensableFeatures[:count]:
            if feature.featureCode == pynvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU:
                return int(feature.featureState > 0)
        return None  # licensing without a vGPU feature: DCGM publishes nothing either

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

    def _slow_due(self, uuid: str) -> bool:
        cadence = self._slow_cadence
        return cadence is None or cadence.due(uuid)

    def _batched(self, uuid: str, handle: Any, with_slow: bool, with_energy: bool) -> _Batch:
        plan = self._plan(uuid, handle).pick(with_slow, with_energy)
        batch = _Batch()
        if not plan.request:
            return batch
        with self._field_values_lock:
            entries = self._nvml.call(
                uuid, "field_values", "nvmlDeviceGetFieldValues", handle, plan.request
            )
        if entries is None:
            batch.answered = False
            return batch
        out = batch.values
        refused: list[int] = []
        # Counted in locals, not on the batch: this loop runs once per field per GPU per sweep.
        nvlink_ok = nvlink_failed = newest_us = 0
        rows = zip(view(entries), plan.attributes, plan.nvlink, strict=True)
        for position, (entry, attribute, nvlink) in enumerate(rows):
            value = field_value(entry)
            if value is None:
                if entry.nvmlReturn in _REFUSED:
                    refused.append(position)
                elif nvlink:
                    nvlink_failed += 1
                continue
            if nvlink:
                nvlink_ok += 1
                # The newest stamp dates the sum, as DCGM does when it adds tx and rx.
                stamp = entry.timestamp
                if stamp > newest_us:
                    newest_us = stamp
            # NVLink counters come per link; everything else once.
            out[attribute] = out.get(attribute, 0) + value
        batch.nvlink_ok, batch.nvlink_failed, batch.nvlink_timestamp_us = (
            nvlink_ok,
            nvlink_failed,
            int(newest_us),
        )
        if refused:
            self._drop_from_plan(uuid, {plan.request[i] for i in refused})
            if any(plan.attributes[i] in _NVLINK_ATTRIBUTES for i in refused):
                # Fewer links from now on: this sum is not comparable with the next one.
                batch.nvlink_failed += 1
        return batch

    def _keep_slow(self, uuid: str, values: dict[str, Any], read: bool) -> None:
        """After a read with the slow fields, remember them; after one without, add them."""
        if read:
            fresh = {a: v for a, v in values.items() if a in _KEPT and v is not None}
            with self._plans_lock:
                self._slow_values[uuid] = fresh
            if self._slow_cadence is not None:
                self._slow_cadence.done(uuid)
            return
        with self._plans_lock:
            kept = self._slow_values.get(uuid)
        if kept:
            values.update(kept)

    def _plan(self, uuid: str, handle: Any) -> _FieldPlans:
        with self._plans_lock:
            plans = self._plans.get(uuid)
        if plans is not None:
            return plans
        fields = {**BATCHED_FIELDS, **_POWER_FIELDS}
        request: list[int | tuple[int, int]] = list(fields)
        attributes = list(fields.values())
        for link in range(self._nvlink_count(uuid, handle)):
            for field_id, attribute in NVLINK_FIELDS.items():
                request.append((field_id, link))
                attributes.append(attribute)
        plans = _FieldPlans(_FieldPlan(request, attributes))
        with self._plans_lock:
            self._plans[uuid] = plans
        return plans

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

    def _drop_from_plan(self, uuid: str, refused: set[FieldRequest]) -> None:
        with self._plans_lock:
            plans = self._plans.get(uuid)
            if plans is not None:
                self._plans[uuid] = _FieldPlans(plans.full.without(refused))

    def _forget_slow(self, uuid: str | None) -> None:
        """The counters may have restarted: read the slow fields in the next sweep."""
        with self._plans_lock:
            if uuid is None:
                self._slow_values.clear()
            else:
                self._slow_values.pop(uuid, None)
        if self._slow_cadence is not None:
            self._slow_cadence.forget(uuid, everything=uuid is None)
        if self._energy is not None:
            self._energy.want_read(uuid)

    def forget(self, uuid: str) -> None:
        """The device was reconfigured (MIG mode) or replaced: ask it afresh."""
        with self._plans_lock:
            self._plans.pop(uuid, None)
        self._forget_slow(uuid)
        self._nvlink_rate.forget(uuid)

    def lost(self, uuid: str) -> None:
        """The GPU fell off the bus: when it returns its counters may have restarted."""
        self._forget_slow(uuid)
        self._nvlink_rate.forget(uuid)

    def retain(self, uuids: Iterable[str]) -> None:
        """Drop what is kept for GPUs that NVML no longer enumerates."""
        keep = set(uuids)
        with self._plans_lock:
            gone = {u for table in (self._plans, self._licence, self._slow_values) for u in table}
            gone -= keep
            for table in (self._plans, self._licence, self._slow_values):
                for uuid in gone & table.keys():
                    del table[uuid]
        for uuid in gone:
            if self._slow_cadence is not None:
                self._slow_cadence.forget(uuid)
        if self._energy is not None:
            self._energy.retain(keep)
        self._nvlink_rate.retain(keep)

    def invalidate(self) -> None:
        """NVML was shut down under us (driver unloaded or reloaded): counters may restart, and
        the licence is read again with the identities."""
        self._nvlink_rate.clear()
        self._forget_slow(None)
        with self._plans_lock:
            self._licence.clear()


def memory_values(mem: Any) -> dict[str, int]:
    """Framebuffer figures as DCGM publishes them (docs/nvml.md, 'Framebuffer memory').

    nvmlMemory_v2 splits the board into used + free + reserved, and DCGM's FB_USED is that `used`
    unchanged, as nvidia-smi's "Used" is. v1 has no reservation field; its `used` is v2's used
    plus the reservation, which is all a pre-R510 driver can tell.
    """
    if mem is None:
        return {}
    mem = view(mem)
    values = {"fb_total_bytes": mem.total, "fb_used_bytes": mem.used, "fb_free_bytes": mem.free}
    reserved = getattr(mem, "reserved", None)
    if reserved is not None:
        values["fb_reserved_bytes"] = reserved
    return values
