"""Validated settings, built once by the command line and passed down; never mutated."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from kube_gpu_exporter.exporter.dcgm_compat import DEFAULT_PROFILE, Profile

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.fields.selection import FieldSelection
    from kube_gpu_exporter.exporter.webconfig.settings import WebSecurity

DEFAULT_PORT = 9455
# A Kubernetes node name: an RFC 1123 DNS subdomain.
NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# An extended resource name as device plugins register it: "vendor.domain/name".
RESOURCE_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


class HostLabel(StrEnum):
    """Which host label the DCGM series carry: dcgm-exporter <= 4.8.2, >= 4.8.3, or none."""

    CLASSIC = "Hostname"
    LOWER = "hostname"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class CollectionConfig:
    interval_seconds: float = 5.0
    # A device read not finished by then is reported stale; the sweep goes on without it.
    device_timeout_seconds: float = 10.0
    pcie_enabled: bool = True
    pcie_interval_seconds: float = 15.0
    # The energy counter, PCIe replays, ECC totals, row remapping, the NVLink counters and the
    # power limit: at most this often, and only before a learnt scrape (scrape_cadence.py); 0
    # reads them every sweep.
    slow_fields_interval_seconds: float = 10.0
    # NVML's total energy counter is read at most this often (at the slow fields' sweeps) and
    # carried forward by board power in between (nvml/energy_estimate.py); 0 reads it with the
    # other slow fields and holds its value in between.
    energy_read_interval_seconds: float = 60.0
    xid_enabled: bool = True
    mig_refresh_seconds: float = 60.0
    # NVML GPM profiling metrics (DCGM_FI_PROF_*) on GPUs that support it (Hopper and newer).
    gpm_enabled: bool = True
    # Per-process GPU memory and SM use, mapped to containers through the host's /proc (needs
    # hostPID or a host /proc at proc_root) and named from the kubelet's logs under log_root.
    processes_enabled: bool = False
    proc_root: str = "/proc"
    log_root: str = "/var/log"
    # Fields of the table (kube_gpu_exporter/exporter/fields/table.py) that are off by default but a
    # --collectors file lists: the reader reads them too.
    extra_fields: frozenset[str] = frozenset()
    # (field name, seconds) from --collector.field-interval: the field is read at most that often
    # instead of on its cadence class's interval (0: every sweep).
    field_intervals: tuple[tuple[str, float], ...] = ()
    # dcgm-exporter's windows for DCGM_EXP_XID_ERRORS_COUNT and DCGM_EXP_CLOCK_EVENTS_COUNT, in
    # milliseconds; None: the family is not listed, so no event history is kept for it.
    xid_count_window_ms: int | None = None
    clock_events_count_window_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LabelConfig:
    # Defaults follow DEFAULT_PROFILE (dcgm-exporter 4.8.3); the CLI resolves the chosen profile
    # and the --host-label / --driver-version-label overrides into these fields.
    host_label: HostLabel = HostLabel.LOWER
    node_name: str = ""
    # Name of the driver-version label on DCGM series ("" = none).
    driver_version_label: str = "DCGM_FI_DRIVER_VERSION"
    # Name of the fabric cluster-UUID label on a GPU's DCGM series ("" = none): set only by a
    # --collectors file that lists DCGM_FI_DEV_FABRIC_CLUSTER_UUID with type label.
    fabric_cluster_label: str = ""
    # A device held by several containers (time-slicing, MPS): "none" leaves its series without
    # pod labels; "per-pod" copies them once per holder, with a `vgpu` label.
    shared_device_series: str = "none"
    # Which dcgm-exporter release the names, units and types imitate.
    dcgm: Profile = DEFAULT_PROFILE
    # dcgm-exporter's opt-ins (--kubernetes-enable-pod-uid / -pod-labels): `pod_uid` and the
    # allow-listed pod labels (sanitised keys) on every DCGM series of a pod's device. Both need
    # the Kubernetes API (--kubernetes).
    pod_uid_on_series: bool = False
    pod_labels_on_series: bool = False
    # With shared_device_series "per-pod" and process accounting: each pod's copy of
    # DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED carries that pod's own use, as dcgm-exporter's
    # --kubernetes-virtual-gpus does (sums over the copies then equal the device's figures only
    # where every process is attributed).
    per_pod_usage: bool = False


@dataclass(frozen=True, slots=True)
class WebConfig:
    listen_address: str = f":{DEFAULT_PORT}"
    telemetry_path: str = "/metrics"
    # The snapshot is reported stale after this many seconds without a finished sweep.
    stale_after_seconds: float = 15.0
    # /healthz fails after this many seconds without a finished sweep, so Kubernetes restarts us.
    health_max_age_seconds: float = 60.0
    # --health.require-gpus: /readyz fails while the sweep sees no GPU.
    health_require_gpus: bool = False
    # Past this many open connections, a new one closes the oldest idle one (slowloris, leaks).
    max_connections: int = 512
    # One client address (an IPv6 /64) may hold this many of them; None: connection_guard.py's
    # default (64, or a quarter of a smaller max_connections).
    max_connections_per_address: int | None = None
    # TLS, client certificates and basic auth from --web.config.file; None: plain HTTP, open.
    security: WebSecurity | None = None


@dataclass(frozen=True, slots=True)
class AttributionConfig:
    podresources_enabled: bool = True
    socket_path: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    # Device-plugin resources besides nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-*,
    # e.g. gpushare's memory units, counted in their own units.
    extra_resources: frozenset[str] = frozenset({"aliyun.com/gpu-mem"})
    kubernetes_enabled: bool = False
    kubeconfig: str | None = None
    pod_label_allowlist: str | None = None
    max_pod_labels: int = 10
    # With kubernetes_enabled: watch this node's ResourceSlices, so DRA devices whose names do
    # not follow NVIDIA's convention resolve by UUID, and offered DRA devices count as allocatable.
    watch_resource_slices: bool = True


@dataclass(frozen=True, slots=True)
class SelectionFlags:
    """The flags a collectors file is applied with (kube_gpu_exporter/exporter/flags/selection.py,
    with_selection), kept so that a file chosen after the command line (a built-in fleet's, under
    --simulate) is applied as --collectors would have been."""

    # dcgm-exporter's default windows (flags.DEFAULT_COUNT_WINDOW_MS).
    xid_count_window_ms: int = 300_000
    clock_events_count_window_ms: int = 300_000
    # --driver-version-label as given; None where it was not, so the file decides.
    driver_label: str | None = None


@dataclass(frozen=True, slots=True)
class Config:
    collection: CollectionConfig
    labels: LabelConfig
    web: WebConfig
    attribution: AttributionConfig = AttributionConfig()
    # The --collectors file's selection; None: the default fields, as the profile spells them.
    fields: FieldSelection | None = None
    selection_flags: SelectionFlags = SelectionFlags()
    simulate: bool = False
    fleet_file: str | None = None
    log_level: str = "info"
    log_format: str = "logfmt"
    # Settings given but not used (a dcgm-exporter variable of another meaning), logged once.
    notices: tuple[str, ...] = ()
