"""The one config every generated artifact is built from: selectors, label names, thresholds,
`for` durations, severities, runbook URLs and dashboard identity.

Users customise the bundle with an overrides file (kube_gpu_exporter/bundle/overrides.py; `make
bundle CONFIG=my.yaml OUT=DIR`) or `dataclasses.replace`, and regenerate, never by editing the
outputs. Every query in `alerts/`, `dashboards/` and `scrape-configs/` takes its selectors and label
names from this object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kube_gpu_exporter import __version__
from kube_gpu_exporter.bundle.override_checks import CheckFailed, matchers, positive_number
from kube_gpu_exporter.exporter.dcgm_compat import DEFAULT_VERSION, DcgmVersion, Profile, profile


class BundleConfigError(ValueError):
    """A config value that would generate broken queries."""


@dataclass(frozen=True, slots=True)
class Selectors:
    # Matchers (without braces) for this exporter's series and for kube-state-metrics'.
    exporter: str = 'job="kube-gpu-exporter"'
    kube_state_metrics: str = 'job="kube-state-metrics"'


@dataclass(frozen=True, slots=True)
class LabelNames:
    cluster: str = "cluster"
    # The exporter's node label (`--host-label`). None follows the bundle's dcgm-exporter profile:
    # "Hostname" for 4.8.2, "hostname" from 4.8.3 (read the resolved name from
    # `BundleConfig.host_label`). kube-state-metrics calls the same thing `node`.
    hostname: str | None = None
    node: str = "node"
    # With honor_labels: false Prometheus renames these to exported_pod / exported_namespace.
    pod: str = "pod"
    namespace: str = "namespace"


@dataclass(frozen=True, slots=True)
class Resources:
    # The exporter's `resource` values of whole GPUs: the device plugin's extended resource and
    # NVIDIA's DRA driver, under which whole GPUs held or offered through DRA count. Every query
    # that means "whole GPUs" matches all of them, so a cluster mixing the two paths (even on
    # one node) adds up. Time-slicing replicas (`nvidia.com/gpu.shared`) are not whole GPUs.
    whole_gpus: tuple[str, ...] = ("nvidia.com/gpu", "gpu.nvidia.com")
    # MIG resources are one of these followed by the profile: the device plugin's mixed strategy
    # (`nvidia.com/mig-1g.10gb`) and MIG devices of the DRA driver (`gpu.nvidia.com/mig-1g.10gb`).
    mig_prefixes: tuple[str, ...] = ("nvidia.com/mig-", "gpu.nvidia.com/mig-")
    # kube-state-metrics spelling of the whole-GPU resource.
    whole_gpu_ksm: str = "nvidia_com_gpu"
    # Every GPU resource in kube-state-metrics spelling: whole, shared and MIG. DRA claims are
    # not container resource requests, so kube-state-metrics has no series for them.
    gpu_ksm_regex: str = "nvidia_com_gpu.*|nvidia_com_mig_.*"
    # Pod sizes the fragmentation panels count ("how many N-GPU pods still fit").
    pod_sizes: tuple[int, ...] = (1, 2, 4, 8)

    @property
    def whole_gpu_regex(self) -> str:
        """A `resource=~` value matching every whole-GPU resource (dots match themselves, and
        Prometheus anchors the match, so `nvidia.com/gpu` never matches `nvidia.com/gpu.shared`)."""
        return "|".join(self.whole_gpus)

    @property
    def mig_regex(self) -> str:
        """A `resource=~` value matching every MIG resource of either allocation path."""
        return "|".join(prefix + ".*" for prefix in self.mig_prefixes)


@dataclass(frozen=True, slots=True)
class Severity:
    critical: str = "critical"
    warning: str = "warning"
    info: str = "info"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Every threshold and `for` duration of the alerts, in one place."""

    exporter_down_for: str = "15m"
    exporter_stale_for: str = "10m"
    nvml_down_for: str = "10m"
    podresources_down_for: str = "15m"
    gpu_lost_for: str = "5m"
    # A GPU that vanished from NVML's device count is compared with the node's recent maximum.
    gpu_missing_lookback: str = "6h"
    gpu_missing_for: str = "10m"
    gpu_unallocatable_for: str = "15m"
    node_unallocatable_for: str = "15m"
    # XID codes that mean a GPU reset, drain or RMA. Left out: 63 (a row remap recorded), 92 (high
    # single-bit rate) and 94 (contained ECC error): the app fails but the GPU keeps working.
    xid_critical_codes: tuple[int, ...] = (48, 62, 64, 74, 79, 95, 119, 120)
    # How long a critical XID keeps its alert active after the last occurrence.
    xid_window: str = "15m"
    # Latched hardware states persist until a reset, so a short `for` only rides out a glitch.
    latched_for: str = "1m"
    throttle_for: str = "5m"
    temperature_warning_celsius: float = 85
    temperature_warning_for: str = "10m"
    temperature_critical_celsius: float = 92
    temperature_critical_for: str = "5m"
    memory_full_ratio: float = 0.95
    memory_full_for: str = "15m"
    # Allocated but idle: peak utilization below this over the idle window, for this long. In
    # percent whatever the profile; queries compare it in the profile's unit (0.01 for 4.9's ratio).
    idle_utilization_percent: float = 1
    idle_window: str = "10m"
    idle_for: str = "1h"
    # NVLink errors (Hopper's CRC/replay/recovery totals, Blackwell's per-GPU error counters):
    # a healthy link still counts the odd CRC error or replay, so the alert waits for more than
    # this many of one counter within the window, and for them to keep coming for `for`.
    nvlink_error_window: str = "10m"
    nvlink_error_threshold: float = 10
    nvlink_errors_for: str = "5m"
    # The fabric manager registers every GPU of an NVLink domain at boot; until it has, the GPU
    # reports "not started" or "in progress", which is only a fault past this grace.
    fabric_startup_grace: str = "10m"
    fabric_degraded_for: str = "5m"
    fabric_unhealthy_for: str = "1m"
    # A Grace-Blackwell GPU's NVLink-C2C link to its CPU reported inactive for this long.
    c2c_inactive_for: str = "5m"
    # The exporter's health verdict (kube_gpu_exporter_gpu_health_reason) asking for an action.
    # Its reasons are latched states (an XID, a pending remap, a lost GPU), so a short `for`
    # only rides out one odd scrape. A reset waits longer: its reasons leave the GPU working
    # until the pods on it can be moved, and a verdict that clears by itself within minutes
    # (a GPU the driver recovered) should not open a ticket.
    health_drain_for: str = "1m"
    health_reboot_for: str = "1m"
    health_reset_for: str = "5m"


@dataclass(frozen=True, slots=True)
class Dashboards:
    name_prefix: str = "GPU / "
    tags: tuple[str, ...] = ("kube-gpu-exporter", "gpu-mixin")
    # Stable uids (Grafana allows 40 characters); changing one breaks users' bookmarks.
    uids: dict[str, str] = field(
        default_factory=lambda: {
            "gpu-cluster-capacity": "kube-gpu-cluster-capacity",
            "gpu-devices": "kube-gpu-devices",
        }
    )
    datasource_name: str = "default"
    datasource_regex: str = ""
    # The range of rate() where Grafana's $__rate_interval is not there: in the recording rules
    # (the energy records' rates). At least four scrape intervals, as Grafana's is, and no
    # shorter than a minute, the step at which the energy records add those rates up.
    rate_interval: str = "5m"
    refresh: str = "30s"
    timezone: str = "utc"
    time_from: str = "now-6h"
    min_interval: str = "1m"
    # Per-device utilization is also recorded as averages and peaks over windows this long, so a
    # table over the whole time range reads one point per window instead of every scrape: at
    # 1,000 nodes and 6 h that is 72 points per device instead of 1,440.
    device_history_window: str = "5m"


@dataclass(frozen=True, slots=True)
class Scrape:
    job_name: str = "kube-gpu-exporter"
    namespace: str = "gpu-monitoring"
    # The pod label and the container/Service port name the DaemonSet uses.
    app_label: str = "app.kubernetes.io/name"
    app_name: str = "kube-gpu-exporter"
    port_name: str = "metrics"
    port: int = 9455
    interval: str = "15s"
    timeout: str = "10s"
    # kube-prometheus-stack selects ServiceMonitors, PodMonitors and rules by this label.
    release_label: str = "kube-prometheus-stack"


@dataclass(frozen=True, slots=True)
class Deployment:
    """The DaemonSet in deploy/: what it runs, where, and with how much."""

    image: str = "kube-gpu-exporter"
    tag: str = __version__
    # The DaemonSet's nodeSelector (all pairs must match). The default is set by the GPU
    # Operator on every node NFD finds an NVIDIA PCI device on, whether its GPUs go through the
    # device plugin or the DRA driver. Never select on the `nvidia.com/gpu` resource or on GPU
    # feature discovery's labels: a DRA-only node may have neither. Without the operator, NFD's
    # own label is `feature.node.kubernetes.io/pci-0302_10de.present` with its default label
    # fields, or `pci-10de.present` when configured with `deviceLabelFields: [vendor]`: see
    # docs/dra.md, 'Deploying on DRA nodes'.
    node_selector: tuple[tuple[str, str], ...] = (("nvidia.com/gpu.present", "true"),)
    # Taints GPU node pools commonly carry (GKE, AKS, EKS guides and the GPU Operator's docs).
    toleration_keys: tuple[str, ...] = ("nvidia.com/gpu",)
    # Sized from `make bench`: steady RSS 56 MB on the default 8-GPU node (59 MB peak with 56 MIG
    # instances, 70 MB under the soak's hostile clients); CPU 25 CPU-seconds an hour at a 5 s
    # interval with a 15 s scrape on the live simulator (7m), 7 of them the exporter's own. 20m
    # leaves room for a real driver's calls, which cost more than the simulator's.
    cpu_request: str = "20m"
    memory_request: str = "80Mi"
    cpu_limit: str = "500m"
    memory_limit: str = "256Mi"
    priority_class: str = "system-node-critical"
    runtime_class: str = "nvidia"
    # A rollout touches this share of GPU nodes at once; one at a time is days on 1,000 nodes.
    max_unavailable: str = "10%"
    grafana_folder: str = "GPU"


@dataclass(frozen=True, slots=True)
class BundleConfig:
    # The dcgm-exporter release the exporter imitates (`--compat.dcgm-exporter`): it decides the
    # DCGM metric names, their units and the default host label of every generated query.
    dcgm_version: str = DEFAULT_VERSION.value
    selectors: Selectors = field(default_factory=Selectors)
    labels: LabelNames = field(default_factory=LabelNames)
    resources: Resources = field(default_factory=Resources)
    severity: Severity = field(default_factory=Severity)
    thresholds: Thresholds = field(default_factory=Thresholds)
    dashboards: Dashboards = field(default_factory=Dashboards)
    scrape: Scrape = field(default_factory=Scrape)
    deployment: Deployment = field(default_factory=Deployment)
    # When on, descriptions name the cluster and the cluster variable is shown.
    show_multi_cluster: bool = False
    # Every alert's `runbook_url`, with %s the alert's name in lower case (its section's anchor).
    # The default is the runbook's path inside the bundle, which every copy of it has, and
    # nothing else: the project has no public home to link to, and a link to one that does not
    # exist is worse than a path. Where your copy of the bundle is browsable (your GitOps
    # repository, a wiki), say so, e.g. https://git.example.com/ops/gpu/blob/main/alerts/runbook.md#%s:
    # Alertmanager, Grafana and chat notifications then show a link that opens. Another flavour's
    # links follow its own runbook (flavours.py replaces `alerts/runbook.md` in the pattern).
    runbook_url_pattern: str = "alerts/runbook.md#%s"
    # Grams of CO2-equivalent per kWh of your electricity: your grid's or your provider's figure
    # (a yearly average, or your contract's), which the bundle cannot know. Set, it adds a record
    # of estimated emissions per namespace and a panel beside the energy ones; None leaves both out.
    carbon_intensity_g_per_kwh: float | None = None

    def __post_init__(self) -> None:
        versions = [v.value for v in DcgmVersion]
        if self.dcgm_version not in versions:
            raise BundleConfigError(
                f"dcgm_version {self.dcgm_version!r} is not one of {', '.join(versions)}"
            )
        if self.labels.hostname is not None and not self.labels.hostname.strip():
            raise BundleConfigError("labels.hostname is empty: set a label name or None")
        for name in ("exporter", "kube_state_metrics"):
            value = getattr(self.selectors, name)
            if not value.strip():
                raise BundleConfigError(f"selectors.{name} is empty: every query needs it")
            # Parsed as PromQL parses matchers: a brace inside a regex (`{2}`) is fine, one
            # around them or a string left open is not.
            try:
                matchers(f"selectors.{name}", value)
            except CheckFailed as exc:
                raise BundleConfigError(str(exc)) from None
        for name in ("whole_gpus", "mig_prefixes"):
            values = getattr(self.resources, name)
            # They are joined into a regex inside a PromQL string.
            if not values or any(not v.strip() or set(v) & set('"\\|()*+?[]{}^$') for v in values):
                raise BundleConfigError(
                    f"resources.{name} {values!r} must list plain resource names, at least one"
                )
        try:
            positive_number("carbon_intensity_g_per_kwh", self.carbon_intensity_g_per_kwh)
        except CheckFailed as exc:
            raise BundleConfigError(str(exc)) from None
        if "%s" not in self.runbook_url_pattern:
            raise BundleConfigError("runbook_url_pattern needs a %s for the alert name")
        for key, uid in self.dashboards.uids.items():
            if not 0 < len(uid) <= 40:
                raise BundleConfigError(f"dashboard uid for {key} must be 1-40 characters")

    @property
    def profile(self) -> Profile:
        return profile(self.dcgm_version)

    @property
    def host_label(self) -> str:
        """The exporter's node label: set explicitly, or the profile's."""
        return self.labels.hostname or self.profile.host_label


DEFAULT = BundleConfig()
