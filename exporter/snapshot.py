"""Immutable results of one NVML sweep.

Values keep NVML's native units (mW, mJ, bytes, MHz, KB/s); conversion to dcgm-exporter's units
happens only in the exposition layer, so the round-trip test can compare against raw NVML data.
`None` always means "NVML gave no value" (not supported, or the call failed this sweep).
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True, slots=True)
class GpuReadings:
    """Board-level values of one GPU, in NVML units."""

    temperature_c: int | None = None
    memory_temperature_c: int | None = None
    gpu_util_pct: int | None = None
    mem_copy_util_pct: int | None = None
    encoder_util_pct: int | None = None
    decoder_util_pct: int | None = None
    fb_total_bytes: int | None = None
    fb_used_bytes: int | None = None
    fb_free_bytes: int | None = None
    fb_reserved_bytes: int | None = None
    power_mw: int | None = None
    power_limit_mw: int | None = None
    enforced_power_limit_mw: int | None = None
    energy_mj: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    clock_event_reasons: int | None = None
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_sbe_aggregate: int | None = None
    ecc_dbe_aggregate: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: int | None = None
    remapped_rows_failure: int | None = None
    pcie_replay_count: int | None = None
    pcie_tx_kbps: int | None = None
    pcie_rx_kbps: int | None = None
    # Cumulative NVLink data counters, summed over links (NVML's KiB).
    nvlink_tx_kib: int | None = None
    nvlink_rx_kib: int | None = None
    # (tx + rx) KiB per second between this sweep's counters and the previous sweep's, from
    # NVML's own sample timestamps; None on the first sweep and after a counter reset.
    nvlink_kib_per_second: float | None = None
    # DCGM's VGPU_LICENSE_STATUS: 1 vGPU licensed, 0 not licensed or licensing unsupported.
    vgpu_license_status: int | None = None
    # The NVLink domain, where the GPU's fabric registration completed; None on a board with no
    # fabric (NVML answers NOT_SUPPORTED) and before or after a failed registration.
    fabric_domain: FabricDomain | None = None
    # (DCGM field name, value) for the field table's rows that have no attribute above (fields
    # only a --collectors file turns on), sorted by name.
    extra: tuple[tuple[str, int | float], ...] = ()

    def extra_value(self, name: str) -> int | float | None:
        for field_name, value in self.extra:
            if field_name == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class ProfilingReadings:
    """NVML GPM averages over the last sampling interval, in dcgm-exporter's profiling units:
    ratios 0-1 of time (or of capacity) active, and bytes per second."""

    graphics_active: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    # GPM "any tensor" activity; the DCGM pipe fields below are per tensor-pipe kind.
    tensor_active: float | None = None
    tensor_hmma_active: float | None = None
    tensor_imma_active: float | None = None
    tensor_dfma_active: float | None = None
    fp64_active: float | None = None
    fp32_active: float | None = None
    fp16_active: float | None = None
    dram_active: float | None = None
    pcie_tx_bytes: float | None = None
    pcie_rx_bytes: float | None = None
    nvlink_tx_bytes: float | None = None
    nvlink_rx_bytes: float | None = None


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
    (exporter/processes/)."""

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
    # Why `owner` is None (exporter.processes.owner reasons).
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
    # sorted by code: how long an XID holds the GPU's health verdict (exporter/health/).
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
    # (exporter/nvml/rejected_readings.py), cumulative since start.
    readings_rejected: tuple[tuple[tuple[str, ...], int], ...] = ()
    last_success_at: float | None = None
    sequence: int = 0
    # Container IDs and pod UIDs the kubelet's log names give more than one name (a leftover or
    # forged name), from process accounting; None when it is off or its owners do not count.
    process_log_name_conflicts: int | None = None
