"""Reads one GPU: its identity once, then its board-level values every sweep, as the field table
(kube_gpu_exporter/exporter/fields/table.py) says.

Every row whose NVML source is a field value (ECC, energy, PCIe replays, row remapping, memory
temperature), plus board power and the per-link NVLink counters, is fetched in a single
`nvmlDeviceGetFieldValues` batch per GPU, checking each entry's own return code. Every row whose
source is a plain getter is one guarded call, shared by the rows that name the same call.

Each row is read on its cadence: every sweep, or with the slow fields (costly counters and rarely
changing ones) only when scrape_cadence.py says they are due, or on its own interval where the
user set one (--collector.field-interval). In between, a row's last value stands, except the
energy counter, which board power carries forward between rarer reads (energy_estimate.py). The
vGPU licence state changes on the scale of minutes, so it is read with the identity.
"""

from __future__ import annotations

import threading
import time
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.fields.model import Cadence, DcgmField, FieldValue, Getter
from kube_gpu_exporter.exporter.fields.nvlink_health_rows import (
    FABRIC_CLIQUE_ID,
    FABRIC_ERROR_CODE,
    FABRIC_FIELDS,
    FABRIC_HEALTH_MASK,
    FABRIC_HEALTH_SUMMARY,
    FABRIC_STATUS,
)
from kube_gpu_exporter.exporter.fields.table import BY_NAME, GPU_FIELDS
from kube_gpu_exporter.exporter.health.verdict import INPUT_FIELDS as HEALTH_INPUT_FIELDS
from kube_gpu_exporter.exporter.nvml.energy_estimate import EnergyEstimates
from kube_gpu_exporter.exporter.nvml.guarded_calls import Alternative, GuardedNvml
from kube_gpu_exporter.exporter.nvml.nvlink_rate import NvlinkRate, NvlinkSample
from kube_gpu_exporter.exporter.nvml.power_bounds import ceiling_mw, rejection
from kube_gpu_exporter.exporter.nvml.rejected_readings import RejectedReadings
from kube_gpu_exporter.exporter.scrape_cadence import ScrapeCadence
from kube_gpu_exporter.exporter.snapshot import FabricDomain, GpuIdentity, GpuReadings
from kube_gpu_exporter.exporter.struct_views import view


def _field_values(rows: Iterable[DcgmField]) -> dict[int, str]:
    return {
        row.source.nvml_field_id: row.name
        for row in rows
        if isinstance(row.source, FieldValue) and not row.source.per_link
    }


_DEFAULT_ROWS = tuple(row for row in GPU_FIELDS if row.default)
# NVML field id -> row name, for the default rows read at the slow fields' cadence
# (scrape_cadence.py): the energy counter (4 ms of CPU per read on an H200), the PCIe replay
# counter (150 µs), and ECC totals and row remapping, which change on the scale of hours.
SLOW_FIELDS: dict[int, str] = _field_values(
    row for row in _DEFAULT_ROWS if row.cadence in (Cadence.SLOW, Cadence.ENERGY)
)
# NVML field id -> row name, for every single-scope field the default batch carries.
BATCHED_FIELDS: dict[int, str] = _field_values(_DEFAULT_ROWS)
# Board power as nvmlDeviceGetPowerUsage reports it: the 1 s average on Ampere (GA100 excepted)
# and newer, the instantaneous draw on the others (docs/nvml.md, 'Power fields'). The batch asks
# for both and takes the average where the GPU has one; the getter stays the fallback for a
# driver that knows neither field.
POWER_AVERAGE = getattr(pynvml, "NVML_FI_DEV_POWER_AVERAGE", 185)
POWER_INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)
_POWER_FIELDS: dict[int, str] = {POWER_AVERAGE: "_power_average", POWER_INSTANT: "_power_instant"}
# The per-link NVLink data counters, under keys of their own (no row's value: GpuReadings'
# nvlink_tx_kib and nvlink_rx_kib, and what the NVLink rate comes from).
_NVLINK_TX, _NVLINK_RX = "_nvlink_tx_kib", "_nvlink_rx_kib"
NVLINK_FIELDS: dict[int, str] = {
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: _NVLINK_TX,
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: _NVLINK_RX,
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


_NVLINK_KEYS = frozenset(NVLINK_FIELDS.values())
# The key of the GPU's NVLink domain (the fabric call, not a row) among the values read.
_FABRIC_DOMAIN = "_fabric_domain"
_POWER_ROW = BY_NAME["DCGM_FI_DEV_POWER_USAGE"]
_NVLINK_ROW = BY_NAME["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]
_ENERGY_ROW = BY_NAME["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
_POWER_LIMITS = tuple(
    BY_NAME[name].name
    for name in ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_POWER_MGMT_LIMIT")
)
_VGPU_LICENSE = BY_NAME["DCGM_FI_DEV_VGPU_LICENSE_STATUS"].name
FieldRequest = int | tuple[int, int]

# Read-cadence groups: every sweep, the slow fields, the energy counter, or one field's own
# interval ("field:<name>", from --collector.field-interval).
SWEEP, SLOW, ENERGY = "sweep", "slow", "energy"


@dataclass
class _FieldPlan:
    """Which batched fields are worth asking this device for; shrinks as NVML says no."""

    request: list[FieldRequest]
    # Where each entry's value goes among the values read (a row's name, or an NVLink counter's).
    keys: list[str]
    groups: list[str]
    # Per position, whether it is a per-link NVLink counter (worked out once, not per sweep).
    nvlink: list[bool] = field(init=False)

    def __post_init__(self) -> None:
        self.nvlink = [key in _NVLINK_KEYS for key in self.keys]

    def keep(self, positions: list[int]) -> _FieldPlan:
        return _FieldPlan(
            [self.request[i] for i in positions],
            [self.keys[i] for i in positions],
            [self.groups[i] for i in positions],
        )

    def without(self, refused: set[FieldRequest]) -> _FieldPlan:
        return self.keep([i for i, entry in enumerate(self.request) if entry not in refused])


@dataclass
class _FieldPlans:
    """A device's whole batch, and its part for each set of due cadence groups (worked out once
    per set, not per sweep)."""

    full: _FieldPlan
    _parts: dict[frozenset[str], _FieldPlan] = field(default_factory=dict)

    def pick(self, due: frozenset[str]) -> _FieldPlan:
        part = self._parts.get(due)
        if part is None:
            groups = self.full.groups
            part = self._parts[due] = self.full.keep(
                [i for i, group in enumerate(groups) if group in due]
            )
        return part


@dataclass
class _Batch:
    """One field-value batch: summed values, and what the NVLink rate needs from it."""

    values: dict[str, int | float] = field(default_factory=dict)
    # False: the call as a whole failed, so nothing in it counts as read.
    answered: bool = True
    nvlink_ok: int = 0
    nvlink_failed: int = 0
    nvlink_timestamp_us: int = 0


@dataclass(frozen=True, slots=True)
class _GetterRead:
    """A getter row as the reader walks it each sweep, worked out once."""

    value_key: str
    group: str
    call_key: str
    functions: tuple[str, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    pick: Any
    whole_gpu_only: bool

    @classmethod
    def of(cls, row: DcgmField, group: str) -> _GetterRead:
        getter = row.source
        assert isinstance(getter, Getter)
        return cls(
            row.name,
            group,
            getter.key,
            getter.functions,
            getter.args,
            dict(getter.kwargs),
            getter.pick,
            getter.whole_gpu_only,
        )

    def alternatives(self, handle: Any) -> list[Alternative]:
        """The calls in order; keyword arguments go with the first alternative only (the newer
        struct version), the next ones being the older API without them."""
        args = (handle, *self.args)
        return [
            (function, args, self.kwargs if position == 0 else {})
            for position, function in enumerate(self.functions)
        ]


class DeviceReader:
    def __init__(
        self,
        nvml: GuardedNvml,
        field_values_lock: threading.Lock,
        slow_fields: ScrapeCadence | None = None,
        energy: EnergyEstimates | None = None,
        *,
        extra_fields: Iterable[str] = (),
        field_cadences: Mapping[str, ScrapeCadence | None] = MappingProxyType({}),
        rejected: RejectedReadings | None = None,
    ) -> None:
        self._nvml = nvml
        self._rejected = rejected or RejectedReadings()
        # Serialised as DataDog does after an incident (datadog-agent #54821).
        self._field_values_lock = field_values_lock
        # None: the energy counter is read with the other slow fields, and stands in between.
        self._energy = energy
        extra = frozenset(extra_fields)
        # The health verdict's inputs are read whether or not a --collectors file lists them;
        # only the listed ones become families.
        wanted = extra | HEALTH_INPUT_FIELDS
        self._rows = tuple(row for row in GPU_FIELDS if row.default or row.name in wanted)
        # Group -> when it is due; None: every sweep. A field with its own interval has a group
        # of its own.
        self._cadences: dict[str, ScrapeCadence | None] = {SWEEP: None, SLOW: slow_fields}
        self._group: dict[str, str] = {}
        for row in self._rows:
            if row.name in field_cadences:
                group = f"field:{row.name}"
                self._cadences[group] = field_cadences[row.name]
            elif row.cadence is Cadence.ENERGY and energy is not None:
                group = ENERGY
            elif row.cadence in (Cadence.SLOW, Cadence.ENERGY):
                group = SLOW
            else:
                group = SWEEP
            self._group[row.name] = group
        # Values a read without their group takes from the last read with it, per group; the
        # energy estimate is worked out every sweep instead.
        self._kept_keys: dict[str, frozenset[str]] = {}
        for row in self._rows:
            keys = {row.name} | (_NVLINK_KEYS if row is _NVLINK_ROW else set())
            if row is _ENERGY_ROW and energy is not None:
                continue
            group = self._group[row.name]
            self._kept_keys[group] = self._kept_keys.get(group, frozenset()) | keys
        # The NVLink domain is read with the slow fields and stands until their next read.
        self._kept_keys[SLOW] = self._kept_keys.get(SLOW, frozenset()) | {_FABRIC_DOMAIN}
        self._getters = tuple(
            _GetterRead.of(row, self._group[row.name])
            for row in self._rows
            if isinstance(row.source, Getter)
        )
        self._batched = {
            row.source.nvml_field_id: (row.name, self._group[row.name])
            for row in self._rows
            if isinstance(row.source, FieldValue) and not row.source.per_link
        }
        # Fields asked once per link (scopeId = link) and summed, as the NVLink rate's are.
        self._per_link = {
            row.source.nvml_field_id: (row.name, self._group[row.name])
            for row in self._rows
            if isinstance(row.source, FieldValue) and row.source.per_link
        }
        # The fabric rows, all from one nvmlDeviceGetGpuFabricInfoV call per GPU.
        self._fabric_rows = tuple(row for row in self._rows if row.name in FABRIC_FIELDS)
        self._plans: dict[str, _FieldPlans] = {}
        # UUID -> group -> the group's values as last read, standing until the next read.
        self._kept: dict[str, dict[str, dict[str, int | float]]] = {}
        # Guards the plans and the per-UUID tables, which the device workers and the sweep share.
        self._plans_lock = threading.Lock()
        self._nvlink_rate = NvlinkRate()
        # UUID -> DCGM's VGPU_LICENSE_STATUS as of the last identity read (None: NVML failed).
        self._licence: dict[str, int | None] = {}
        # UUID -> the highest power limit the board has given (its maximum, or a limit read
        # since): what a power reading is checked against (power_bounds.py).
        self._power_limits: dict[str, float] = {}

    def read_identity(self, index: int, handle: Any) -> GpuIdentity:
        raw = self._nvml.raw
        uuid = _text(raw("nvmlDeviceGetUUID", handle))
        name = _text(raw("nvmlDeviceGetName", handle))
        pci = raw("nvmlDeviceGetPciInfo", handle)
        mig = self._nvml.call(uuid, "mig_mode", "nvmlDeviceGetMigMode", handle)
        licence = self._vgpu_licence(uuid, handle)
        minor = self._nvml.call(uuid, "minor_number", "nvmlDeviceGetMinorNumber", handle)
        constraints = self._nvml.call(
            uuid, "power_limit_constraints", "nvmlDeviceGetPowerManagementLimitConstraints", handle
        )
        with self._plans_lock:
            self._licence[uuid] = licence
            if constraints is not None:
                self._power_limits[uuid] = ceiling_mw([constraints[1]])
        return GpuIdentity(
            index=index,
            uuid=uuid,
            name=name,
            pci_bus_id=_text(pci.busId),
            mig_enabled=None if mig is None else bool(mig[0]),
            mig_pending=None if mig is None else bool(mig[1]),
            minor_number=None if minor is None else int(minor),
        )

    def _due(self, uuid: str) -> frozenset[str]:
        due = {
            group
            for group, cadence in self._cadences.items()
            if cadence is None or cadence.due(uuid)
        }
        # The energy counter is read only in a sweep that reads the slow fields, when its own
        # interval has passed too.
        if self._energy is not None and SLOW in due and self._energy.read_due(uuid):
            due.add(ENERGY)
        return frozenset(due)

    def read_board(self, identity: GpuIdentity, handle: Any) -> GpuReadings:
        uuid = identity.uuid
        mig_parent = bool(identity.mig_enabled)
        due = self._due(uuid)
        values: dict[str, Any] = {}
        # Rows naming the same call (utilization, memory) share one answer per sweep.
        answers: dict[str, Any] = {}
        for read in self._getters:
            # Utilization, encoder and decoder are documented NOT_SUPPORTED on a MIG-enabled
            # parent, and its framebuffer is reported per instance. Skip them by rule rather than
            # memoising, since MIG mode can be switched off again.
            if read.group not in due or (read.whole_gpu_only and mig_parent):
                continue
            key = read.call_key
            if key in answers:
                answer = answers[key]
            else:
                answer = answers[key] = self._nvml.first_available(
                    uuid, key, read.alternatives(handle)
                )
            if answer is not None:
                values[read.value_key] = answer if read.pick is None else read.pick(answer)
        # The fabric is read with the slow fields whether or not its rows are listed: the
        # NVLink domain info family is always on (one call per GPU; a board without a fabric
        # answers NOT_SUPPORTED once and is not asked again).
        if SLOW in due or any(self._group[row.name] in due for row in self._fabric_rows):
            domain, fabric = self._fabric(uuid, handle)
            values[_FABRIC_DOMAIN] = domain
            for row in self._fabric_rows:
                if self._group[row.name] in due and row.name in fabric:
                    values[row.name] = fabric[row.name]
        batch = self._batched_read(uuid, handle, due)
        batched = batch.values
        power_group = self._group[_POWER_ROW.name]
        average, instant = (batched.pop(a, None) for a in _POWER_FIELDS.values())
        power = average if average is not None else instant
        if power is None and power_group in due:
            power = self._nvml.call(uuid, "power", "nvmlDeviceGetPowerUsage", handle)
        ceiling = self._power_ceiling(uuid, values)
        if power is not None and (reason := rejection(power, ceiling)) is not None:
            self._rejected.record(uuid, _POWER_ROW.name, reason, power)
            power = None
        if power is not None:
            values[_POWER_ROW.name] = power
        if batch.nvlink_failed:
            # A sum over only some links would look like a counter going backwards.
            for key in _NVLINK_KEYS:
                batched.pop(key, None)
        elif batch.nvlink_ok:
            values[_NVLINK_ROW.name] = self._nvlink_rate.update(
                uuid,
                NvlinkSample(
                    total_kib=int(batched.get(_NVLINK_TX, 0) + batched.get(_NVLINK_RX, 0)),
                    counters=batch.nvlink_ok,
                    timestamp_us=batch.nvlink_timestamp_us,
                    monotonic_s=time.monotonic(),
                ),
            )
        energy_read = batched.pop(_ENERGY_ROW.name, None) if self._energy is not None else None
        values.update(batched)
        self._keep(uuid, values, due, batch.answered)
        if self._energy is not None:
            # An unsigned long long field: int already, but the batch types all its values alike.
            counter_mj = None if energy_read is None else int(energy_read)
            # Only power sampled in this very sweep carries the counter: a power row on a slower
            # cadence of its own leaves the counter to its own reads.
            sampled = power if power_group == SWEEP else None
            values[_ENERGY_ROW.name] = self._energy.update(uuid, sampled, counter_mj, ceiling)
        with self._plans_lock:
            values[_VGPU_LICENSE] = self._licence.get(uuid)
        tx, rx = values.pop(_NVLINK_TX, None), values.pop(_NVLINK_RX, None)
        domain = values.pop(_FABRIC_DOMAIN, None)
        # Every other key is a row's name.
        rows = MappingProxyType({k: v for k, v in values.items() if v is not None})
        return GpuReadings(rows, tx, rx, domain)

    def _power_ceiling(self, uuid: str, values: Mapping[str, Any]) -> float:
        """The most this board can draw, as far as its limits tell, raised by any limit read
        this sweep (the limits can be set above the maximum the board gave at start only by a
        new driver, but a board with no maximum at all has only these)."""
        limits = tuple(values.get(name) for name in _POWER_LIMITS)
        with self._plans_lock:
            known = self._power_limits.get(uuid)
            if any(limit is not None for limit in limits):
                known = ceiling_mw((known, *limits))
                self._power_limits[uuid] = known
        return ceiling_mw((known,))

    def _fabric(self, uuid: str, handle: Any) -> tuple[FabricDomain | None, dict[str, int]]:
        """The GPU's NVLink domain and the fabric rows' values (docs/nvml.md, 'Fabric, NVLink
        errors, C2C and the recovery action'); (None, {}) where the GPU has no fabric
        (NOT_SUPPORTED, remembered by the guard) or the call failed."""
        info = pynvml.c_nvmlGpuFabricInfo_v3_t()
        answer = self._nvml.probe(uuid, "fabric", "nvmlDeviceGetGpuFabricInfoV", handle, info)
        if answer is None:
            return None, {}
        state = int(info.state)
        completed = state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
        failed = completed and info.status != pynvml.NVML_SUCCESS
        # The domain is the fabric manager's to give: only a registration that completed
        # without error has one (before, the UUID is all zeros).
        domain = None
        if completed and not failed:
            cluster = str(uuidlib.UUID(bytes=bytes(info.clusterUuid)))
            domain = FabricDomain(cluster_uuid=cluster, clique_id=int(info.cliqueId))
        values = {
            # DCGM's fabric manager status: the probe state, and 4 for one completed in error.
            FABRIC_STATUS: 4 if failed else state,
            FABRIC_CLIQUE_ID: int(info.cliqueId),
            FABRIC_HEALTH_MASK: int(info.healthMask),
            FABRIC_HEALTH_SUMMARY: int(info.healthSummary),
        }
        if completed:
            values[FABRIC_ERROR_CODE] = int(info.status)
        return domain, values

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

    def _batched_read(self, uuid: str, handle: Any, due: frozenset[str]) -> _Batch:
        plan = self._plan(uuid, handle).pick(due)
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
        rows = zip(view(entries), plan.keys, plan.nvlink, strict=True)
        for position, (entry, key, nvlink) in enumerate(rows):
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
            out[key] = out.get(key, 0) + value
        batch.nvlink_ok, batch.nvlink_failed, batch.nvlink_timestamp_us = (
            nvlink_ok,
            nvlink_failed,
            int(newest_us),
        )
        if refused:
            self._drop_from_plan(uuid, {plan.request[i] for i in refused})
            if any(plan.keys[i] in _NVLINK_KEYS for i in refused):
                # Fewer links from now on: this sum is not comparable with the next one.
                batch.nvlink_failed += 1
        return batch

    def _keep(self, uuid: str, values: dict[str, Any], due: frozenset[str], answered: bool) -> None:
        """After a read with a group, remember its values; after one without (or one whose batch
        failed), fill in the values it lacks. A group is done only when the batch answered: a
        failed batch is retried at the next sweep."""
        with self._plans_lock:
            kept = self._kept.setdefault(uuid, {})
            for group, keys in self._kept_keys.items():
                if group == SWEEP:
                    continue
                if group in due and answered:
                    kept[group] = {k: v for k, v in values.items() if k in keys and v is not None}
                else:
                    for key, value in kept.get(group, {}).items():
                        if values.get(key) is None:
                            values[key] = value
        for group in due:
            cadence = self._cadences.get(group)
            if cadence is not None and answered:
                cadence.done(uuid)

    def _plan(self, uuid: str, handle: Any) -> _FieldPlans:
        with self._plans_lock:
            plans = self._plans.get(uuid)
        if plans is not None:
            return plans
        power_group = self._group[_POWER_ROW.name]
        entries: dict[int, tuple[str, str]] = {
            **self._batched,
            **{field_id: (attr, power_group) for field_id, attr in _POWER_FIELDS.items()},
        }
        request: list[FieldRequest] = list(entries)
        keys = [key for key, _group in entries.values()]
        groups = [group for _key, group in entries.values()]
        nvlink_group = self._group.get(_NVLINK_ROW.name)
        if nvlink_group is not None or self._per_link:
            links = self._nvlink_count(uuid, handle)
            per_link = dict(self._per_link)
            if nvlink_group is not None:
                per_link.update({fid: (key, nvlink_group) for fid, key in NVLINK_FIELDS.items()})
            for link in range(links):
                for field_id, (key, group) in per_link.items():
                    request.append((field_id, link))
                    keys.append(key)
                    groups.append(group)
        plans = _FieldPlans(_FieldPlan(request, keys, groups))
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

    def _forget_kept(self, uuid: str | None) -> None:
        """The counters may have restarted: read every group in the next sweep."""
        with self._plans_lock:
            if uuid is None:
                self._kept.clear()
            else:
                self._kept.pop(uuid, None)
        for cadence in self._cadences.values():
            if cadence is not None:
                cadence.forget(uuid, everything=uuid is None)
        if self._energy is not None:
            self._energy.want_read(uuid)

    def forget(self, uuid: str) -> None:
        """The device was reconfigured (MIG mode) or replaced: ask it afresh."""
        with self._plans_lock:
            self._plans.pop(uuid, None)
        self._forget_kept(uuid)
        self._nvlink_rate.forget(uuid)

    def lost(self, uuid: str) -> None:
        """The GPU fell off the bus: when it returns its counters may have restarted."""
        self._forget_kept(uuid)
        self._nvlink_rate.forget(uuid)

    def retain(self, uuids: Iterable[str]) -> None:
        """Drop what is kept for GPUs that NVML no longer enumerates."""
        keep = set(uuids)
        with self._plans_lock:
            tables: tuple[dict[str, Any], ...] = (
                self._plans,
                self._licence,
                self._kept,
                self._power_limits,
            )
            gone = {u for table in tables for u in table} - keep
            for table in tables:
                for uuid in gone & table.keys():
                    del table[uuid]
        for uuid in gone:
            for cadence in self._cadences.values():
                if cadence is not None:
                    cadence.forget(uuid)
        if self._energy is not None:
            self._energy.retain(keep)
        self._nvlink_rate.retain(keep)

    def invalidate(self) -> None:
        """NVML was shut down under us (driver unloaded or reloaded): counters may restart, and
        the licence is read again with the identities."""
        self._nvlink_rate.clear()
        self._forget_kept(None)
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
