"""Immutable results of one NVML sweep.

Values keep NVML's native units (mW, mJ, bytes, MHz, KB/s); conversion to dcgm-exporter's units
happens only in the exposition layer, so the round-trip test can compare against raw NVML data.
`None` always means "NVML gave no value" (not supported, or the call failed this sweep); in the
readings' maps of rows to values, such a row is absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypedDict


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """Attributes that do not change while the driver stays loaded."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    # None: the device does not support MIG (GetMigMode is NOT_SUPPORTED).
    mig_enabled: bool | None = None
    mig_pending: bool | None = None
    # The /dev/nvidia<minor> number, which NVIDIA's DRA driver names whole GPUs by (gpu-<minor>);
    # it need not equal the index. None: NVML did not answer.
    minor_number: int | None = None

    @property
    def device(self) -> str:
        return f"nvidia{self.index}"

    @property
    def mig_mode(self) -> str:
        if self.mig_enabled is None:
            return "unsupported"
        return "enabled" if self.mig_enabled else "disabled"


@dataclass(frozen=True, slots=True)
class FabricDomain:
    """The NVLink domain a fabric manager registered the GPU in (nvmlDeviceGetGpuFabricInfoV):
    every GPU of one NVL72 rack's domain has the same pair."""

    # The cluster UUID, in the 8-4-4-4-12 form.
    cluster_uuid: str
    clique_id: int


# A reading's value, in NVML's native unit.
Reading = int | float
# What GpuReadings.of and ProfilingReadings.of accept: None (no value) is left out of the map.
Values = Mapping[str, Reading | None]

_NO_VALUES: Mapping[str, Reading] = MappingProxyType({})

# The rows (classic DCGM names in kube_gpu_exporter/exporter/fields/table.py) whose values code
# computes with, read by GpuReadings' accessors. Every other row is only exported: it needs nothing
# here.
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
POWER_MGMT_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
ENFORCED_POWER_LIMIT = "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"
TOTAL_ENERGY_CONSUMPTION = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"
ENC_UTIL = "DCGM_FI_DEV_ENC_UTIL"
DEC_UTIL = "DCGM_FI_DEV_DEC_UTIL"
CLOCK_THROTTLE_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
PCIE_TX_THROUGHPUT = "DCGM_FI_DEV_PCIE_TX_THROUGHPUT"
PCIE_RX_THROUGHPUT = "DCGM_FI_DEV_PCIE_RX_THROUGHPUT"
NVLINK_BANDWIDTH_TOTAL = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
# GPM rows (ProfilingReadings).
PROF_GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
PROF_SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
# The framebuffer rows, which a MIG instance has of its own, and the utilization rows, which NVML
# has only for a whole GPU.
FRAMEBUFFER = (FB_TOTAL, FB_USED, FB_FREE, FB_RESERVED)
UTILIZATION = (GPU_UTIL, MEM_COPY_UTIL, ENC_UTIL, DEC_UTIL)
# Every name above: each must be a row of the field table (tests/unit/test_field_table.py).
ACCESSOR_ROWS = (
    POWER_USAGE,
    POWER_MGMT_LIMIT,
    ENFORCED_POWER_LIMIT,
    TOTAL_ENERGY_CONSUMPTION,
    *FRAMEBUFFER,
    *UTILIZATION,
    CLOCK_THROTTLE_REASONS,
    PCIE_TX_THROUGHPUT,
    PCIE_RX_THROUGHPUT,
    NVLINK_BANDWIDTH_TOTAL,
    PROF_GR_ENGINE_ACTIVE,
    PROF_SM_ACTIVE,
)


def _frozen(values: Values) -> Mapping[str, Reading]:
    """An immutable copy of `values` without the ones that are None."""
    return MappingProxyType({k: v for k, v in values.items() if v is not None})


def _int(value: Reading | None) -> int | None:
    """An integer row's value (a counter, bytes, a bitmask) as the int NVML gives."""
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class GpuReadings:
    """Board-level values of one GPU, in NVML units."""

    # Field-table row (its classic DCGM name) -> its value in NVML's native unit (the row's
    # native_unit), filled by the readers (nvml/device_reader.py, the samplers). A row with no
    # value (not supported, not read, or the call failed this sweep) is absent. The exposition
    # writes every row from here by name; build one with `of`, change one with `with_values`.
    values: Mapping[str, Reading] = field(default_factory=lambda: _NO_VALUES)
    # Cumulative NVLink data counters, summed over links (NVML's KiB); no row's value, but what
    # the NVLink rate (DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL) and our own byte counters come from.
    nvlink_tx_kib: int | None = None
    nvlink_rx_kib: int | None = None
    # The NVLink domain, where the GPU's fabric registration completed; None on a board with no
    # fabric (NVML answers NOT_SUPPORTED) and before or after a failed registration.
    fabric_domain: FabricDomain | None = None

    @classmethod
    def of(
        cls,
        values: Values = _NO_VALUES,
        /,
        *,
        nvlink_tx_kib: int | None = None,
        nvlink_rx_kib: int | None = None,
        fabric_domain: FabricDomain | None = None,
        **rows: Reading | None,
    ) -> GpuReadings:
        """Readings from row names and values, as a mapping or as keywords:
        `GpuReadings.of({"DCGM_FI_DEV_GPU_TEMP": 40})` or `GpuReadings.of(DCGM_FI_DEV_GPU_TEMP=40)`.
        None is no value."""
        return cls(
            _frozen({**values, **rows}) if rows else _frozen(values),
            nvlink_tx_kib,
            nvlink_rx_kib,
            fabric_domain,
        )

    def with_values(self, changes: Values) -> GpuReadings:
        """A copy with the rows of `changes` set to their values (None: to no value)."""
        values = dict(self.values)
        for name, value in changes.items():
            if value is None:
                values.pop(name, None)
            else:
                values[name] = value
        return GpuReadings(
            MappingProxyType(values), self.nvlink_tx_kib, self.nvlink_rx_kib, self.fabric_domain
        )

    def __hash__(self) -> int:
        # A mapping proxy does not hash; its items do.
        items = frozenset(self.values.items())
        return hash((items, self.nvlink_tx_kib, self.nvlink_rx_kib, self.fabric_domain))

    # Typed views of the rows that code computes with (energy, attribution, health, clock events).

    @property
    def power_mw(self) -> Reading | None:
        return self.values.get(POWER_USAGE)

    @property
    def power_limit_mw(self) -> Reading | None:
        return self.values.get(POWER_MGMT_LIMIT)

    @property
    def enforced_power_limit_mw(self) -> Reading | None:
        return self.values.get(ENFORCED_POWER_LIMIT)

    @property
    def energy_mj(self) -> int | None:
        return _int(self.values.get(TOTAL_ENERGY_CONSUMPTION))

    @property
    def fb_total_bytes(self) -> int | None:
        return _int(self.values.get(FB_TOTAL))

    @property
    def fb_used_bytes(self) -> int | None:
        return _int(self.values.get(FB_USED))

    @property
    def fb_free_bytes(self) -> int | None:
        return _int(self.values.get(FB_FREE))

    @property
    def fb_reserved_bytes(self) -> int | None:
        return _int(self.values.get(FB_RESERVED))

    @property
    def gpu_util_pct(self) -> Reading | None:
        return self.values.get(GPU_UTIL)

    @property
    def mem_copy_util_pct(self) -> Reading | None:
        return self.values.get(MEM_COPY_UTIL)

    @property
    def encoder_util_pct(self) -> Reading | None:
        return self.values.get(ENC_UTIL)

    @property
    def decoder_util_pct(self) -> Reading | None:
        return self.values.get(DEC_UTIL)

    @property
    def clock_event_reasons(self) -> int | None:
        """The NVML clock-event reason bitmask."""
        return _int(self.values.get(CLOCK_THROTTLE_REASONS))

    @property
    def pcie_tx_kbps(self) -> Reading | None:
        return self.values.get(PCIE_TX_THROUGHPUT)

    @property
    def pcie_rx_kbps(self) -> Reading | None:
        return self.values.get(PCIE_RX_THROUGHPUT)

    @property
    def nvlink_kib_per_second(self) -> Reading | None:
        """(tx + rx) KiB per second between this sweep's counters and the previous sweep's, from
        NVML's own sample timestamps; None on the first sweep and after a counter reset."""
        return self.values.get(NVLINK_BANDWIDTH_TOTAL)


@dataclass(frozen=True, slots=True)
class ProfilingReadings:
    """NVML GPM averages over the last sampling interval, in dcgm-exporter's profiling units:
    ratios 0-1 of time (or of capacity) active, and bytes per second."""

    # GPM row of the field table (its classic DCGM name, DCGM_FI_PROF_*) -> its value; a metric
    # GPM did not give this interval is absent.
    values: Mapping[str, Reading] = field(default_factory=lambda: _NO_VALUES)

    @classmethod
    def of(cls, values: Values = _NO_VALUES, /, **rows: Reading | None) -> ProfilingReadings:
        """As GpuReadings.of: `ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=0.5)`."""
        return cls(_frozen({**values, **rows}) if rows else _frozen(values))

    def __hash__(self) -> int:
        return hash(frozenset(self.values.items()))

    @property
    def graphics_active(self) -> Reading | None:
        return self.values.get(PROF_GR_ENGINE_ACTIVE)

    @property
    def sm_active(self) -> Reading | None:
        return self.values.get(PROF_SM_ACTIVE)


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device (a GPU instance with its compute instance) on a MIG-enabled GPU."""

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    fb_total_bytes: int | None = None
    fb_used_bytes: int | None = None
    fb_free_bytes: int | None = None
    fb_reserved_bytes: int | None = None
    multiprocessor_count: int | None = None
    # The GPU instance's placement on the memory slices and the driver's GI profile ID (19 for
    # 1g on Hopper), which NVIDIA's DRA driver writes into MIG device names. None where NVML
    # refuses them: nvmlGpuInstanceGetInfo needs a privileged caller.
    placement_start: int | None = None
    placement_size: int | None = None
    gpu_instance_profile_id: int | None = None


@dataclass(frozen=True, slots=True)
class ProcessOwner:
    """Who a GPU process belongs to, as far as the host's /proc and /var/log tell
    (kube_gpu_exporter/exporter/processes/)."""

    pod_uid: str
    container_id: str
    # Names from /var/log/pods and /var/log/containers; empty where the logs do not tell (the
    # exposition then looks the UID up in the Kubernetes view, with --kubernetes).
    namespace: str = ""
    pod: str = ""
    container: str = ""
    # Set only when the log names of the container disagree (two symlinks for one container
    # ID): every (namespace, pod, container) they give. `container` is then empty, and
    # `namespace` and `pod` are the pod UID's one /var/log/pods directory where it names one of
    # the candidates' pods, else empty too. The join picks among them by what the API server
    # and the kubelet report (processes/pod_usage.py), never by listing order.
    name_candidates: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process NVML lists on a GPU or a MIG instance, with its owner where /proc tells."""

    pid: int
    # The GPU instance it runs in on a MIG-enabled GPU; None on a whole GPU.
    gpu_instance_id: int | None
    # Device memory it holds (NVML's usedGpuMemory); None where NVML does not say.
    used_memory_bytes: int | None
    # SM activity share, percent of the sampling window since the previous sample (0 for a process
    # NVML had no sample for: it was idle); None on MIG (NVML has no per-process utilization
    # there), where it is not supported, or when the utilization read failed.
    sm_util_pct: int | None = None
    owner: ProcessOwner | None = None
    # Why `owner` is None (kube_gpu_exporter.exporter.processes.owner reasons).
    unattributed_reason: str = ""


@dataclass(frozen=True, slots=True)
class XidRecord:
    """What the XID event thread has seen for one entity since the exporter started."""

    last_xid: int = 0
    # Global event sequence of last_xid, to tell which of two records saw the newer event.
    sequence: int = 0
    # (xid code, count) pairs sorted by code; a tuple keeps the snapshot hashable and immutable.
    counts: tuple[tuple[int, int], ...] = ()
    # (xid code, count) pairs of the events within --xid-count-window-size, sorted by code; always
    # empty without that window. The window ends at the sweep that made the snapshot, where
    # dcgm-exporter ends it at the scrape: they differ by less than one sweep interval.
    window_counts: tuple[tuple[int, int], ...] = ()
    # (xid code, time of its last event on the XID book's clock, time.monotonic in production),
    # sorted by code: how long an XID holds the GPU's health verdict
    # (kube_gpu_exporter/exporter/health/).
    last_seen: tuple[tuple[int, float], ...] = ()


NO_XID = XidRecord()


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    identity: GpuIdentity
    up: bool
    readings: GpuReadings | None
    mig_instances: tuple[MigInstance, ...] = ()
    # XID state for the whole GPU and per GPU-instance id.
    xid: XidRecord = NO_XID
    instance_xids: tuple[tuple[int, XidRecord], ...] = ()
    # True when this device's read did not finish in time and its values are from an earlier sweep.
    stale: bool = False
    error: str | None = None
    # GPM, where the device supports it: the whole GPU, and per GPU-instance id on MIG.
    profiling: ProfilingReadings | None = None
    instance_profiling: tuple[tuple[int, ProfilingReadings], ...] = ()
    # (clock_event name, sweeps in which that clock event reason was active) since the exporter
    # started, as dcgm-exporter's DCGM_EXP_CLOCK_EVENTS_TOTAL counts reported reasons.
    clock_event_counts: tuple[tuple[str, int], ...] = ()
    # (clock_event name, sweeps) within --clock-events-count-window-size, for the reasons active
    # at least once in it, in CLOCK_EVENTS order; always empty without that window. The window
    # ends at the sweep that made this snapshot (dcgm-exporter's at the scrape, less than one
    # sweep interval later).
    clock_event_window_counts: tuple[tuple[str, int], ...] = ()
    # The processes on this GPU and its MIG instances; None when process accounting is off or
    # its last round failed for this GPU.
    processes: tuple[GpuProcess, ...] | None = None
    # (peer GPU index, NVML's P2P status over NVLink) for each other GPU that answered, sorted by
    # peer; empty unless a --collectors file lists DCGM_EXP_P2P_STATUS (nvml/p2p_status.py).
    p2p_nvlink: tuple[tuple[int, int], ...] = ()

    def profiling_of(self, gpu_instance_id: int | None) -> ProfilingReadings | None:
        if gpu_instance_id is None:
            return self.profiling
        return dict(self.instance_profiling).get(gpu_instance_id)

    def instance_xid(self, gpu_instance_id: int) -> XidRecord:
        for gi, record in self.instance_xids:
            if gi == gpu_instance_id:
                return record
        return NO_XID


class HelperParts(TypedDict, total=False):
    """What the poller's helpers fill in on a GPU's snapshot (nvml/helper.py, `contribution`),
    as GpuSnapshot's keyword arguments: gathered from every helper, then the snapshot is built
    once, rather than copied by each helper with data for the GPU (a copy of this dataclass is a
    few µs)."""

    # The sweep's readings with a helper's own values added (the PCIe sampler's throughput);
    # one helper at most sets them, or the last would drop the others' values.
    readings: GpuReadings | None
    xid: XidRecord
    instance_xids: tuple[tuple[int, XidRecord], ...]
    profiling: ProfilingReadings | None
    instance_profiling: tuple[tuple[int, ProfilingReadings], ...]
    processes: tuple[GpuProcess, ...] | None
    p2p_nvlink: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    """node_exporter-style health of one collector: did its last run succeed, how long it took."""

    name: str
    success: bool
    duration_seconds: float


@dataclass(frozen=True, slots=True)
class ConnectionCounts:
    """The HTTP server's connections: open now, and closed for being over the cap since start."""

    open: int
    evicted: int


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    taken_at: float
    """Wall-clock time (seconds since the epoch) when the sweep finished."""
    monotonic_at: float
    sweep_duration_seconds: float
    nvml_up: bool
    driver_version: str | None
    gpus: tuple[GpuSnapshot, ...]
    collectors: tuple[CollectorStatus, ...] = ()
    # ((function, error name), count) pairs, cumulative since start.
    nvml_errors: tuple[tuple[tuple[str, ...], int], ...] = ()
    # ((GPU uuid, DCGM field, reason), count): readings left out as ones the GPU cannot produce
    # (kube_gpu_exporter/exporter/nvml/rejected_readings.py), cumulative since start.
    readings_rejected: tuple[tuple[tuple[str, ...], int], ...] = ()
    last_success_at: float | None = None
    sequence: int = 0
    # Container IDs and pod UIDs the kubelet's log names give more than one name (a leftover or
    # forged name), from process accounting; None when it is off or its owners do not count.
    process_log_name_conflicts: int | None = None
