"""Every flag of the exporter, one row each. The parser (parser.py), the environment variables, the
config file (config_file.py), docs/configuration.md's flag table (docs_table.py) and the Helm
chart's extraArgs schema (kube_gpu_exporter/bundle/helm_chart.py) are all made from these rows, so
adding a flag is adding a row here and reading it where the configuration is built (settings.py).

A help text says what the flag does; its default is added from the row, so it cannot drift."""

from __future__ import annotations

from kube_gpu_exporter.exporter.config import DEFAULT_PORT, HostLabel
from kube_gpu_exporter.exporter.dcgm_compat import DEFAULT_VERSION, DcgmVersion
from kube_gpu_exporter.exporter.durations import DAY, HOUR, MINUTE, format_duration
from kube_gpu_exporter.exporter.fields.flags import (
    CLASS_INTERVALS,
    DEFAULT_COUNT_WINDOW_MS,
    field_intervals,
    window_ms,
)
from kube_gpu_exporter.exporter.flags.model import Flag, Kind
from kube_gpu_exporter.exporter.logs import LEVELS

DRIVER_LABELS = ("none", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION")
# The upper bounds of the durations are what a cluster admin could mean (poll and read intervals
# up to an hour, ages and refreshes up to a day) and keep every timer, Event.wait() and
# monotonic-clock sum built from them far below threading.TIMEOUT_MAX.
ANY_COUNT = (1, 1_000_000)

FLAGS: tuple[Flag, ...] = (
    Flag(
        "--config.file",
        "config_file",
        Kind.TEXT,
        None,
        "A YAML file of flags, keyed by the flag's name split at its dots (collector: {interval: "
        "5s}); a flag on the command line wins, then its environment variable, then the file.",
        metavar="FILE",
        see="configuration.md#the-config-file",
    ),
    Flag(
        "--web.listen-address",
        "listen_address",
        Kind.TEXT,
        f":{DEFAULT_PORT}",
        "Address to listen on, [::1]:PORT for IPv6; dcgm-exporter's 9400 stays free, so both "
        "can run side by side.",
    ),
    Flag(
        "--web.config.file",
        "web_config_file",
        Kind.TEXT,
        None,
        "TLS, client certificates and basic auth in the Prometheus exporter-toolkit format "
        "(tls_server_config, http_server_config, basic_auth_users).",
        metavar="FILE",
        see="configuration.md#tls-and-basic-auth---webconfigfile",
    ),
    Flag(
        "--web.telemetry-path",
        "telemetry_path",
        Kind.TEXT,
        "/metrics",
        "Path of the metrics endpoint.",
    ),
    Flag(
        "--web.max-connections",
        "max_connections",
        Kind.COUNT,
        512,
        "At most this many open HTTP connections; past it, a new connection closes the oldest "
        "idle one, so slow or stuck clients cannot lock Prometheus out.",
        bounds=ANY_COUNT,
        see="faults.md#http",
    ),
    Flag(
        "--web.max-connections-per-address",
        "max_connections_per_address",
        Kind.COUNT,
        None,
        "At most this many open HTTP connections from one client address, an IPv6 /64; past it, "
        "that address's new connection closes its own oldest idle one, never another client's.",
        bounds=ANY_COUNT,
        metavar="N",
        shown_default="64, or a quarter of a smaller --web.max-connections",
    ),
    Flag(
        "--collector.interval",
        "interval",
        Kind.DURATION,
        5.0,
        "How often NVML is polled. NVML refreshes utilization at most every 1/6 s to 1 s, so "
        "sub-second intervals only cost CPU. Durations: 500ms, 5s, 1m.",
        bounds=(0.1, HOUR),
    ),
    Flag(
        "--collector.device-timeout",
        "device_timeout",
        Kind.DURATION,
        10.0,
        "A GPU whose read takes longer is served from its last values, marked stale.",
        bounds=(0.1, 10 * MINUTE),
    ),
    Flag(
        "--collector.pcie",
        "pcie",
        Kind.SWITCH,
        True,
        "PCIe TX/RX throughput, sampled in its own thread (the NVML call blocks 20 ms per "
        "direction per GPU).",
    ),
    Flag(
        "--collector.pcie-interval",
        "pcie_interval",
        Kind.DURATION,
        None,
        "How often PCIe throughput is sampled.",
        bounds=(1.0, HOUR),
        deprecated="--collector.field-interval pcie-sampler=SECONDS",
    ),
    Flag(
        "--collector.slow-fields-interval",
        "slow_fields_interval",
        Kind.DURATION,
        None,
        "How often the slow fields are read.",
        bounds=(0.0, HOUR),
        deprecated="--collector.field-interval slow-fields=SECONDS",
    ),
    Flag(
        "--collector.energy-read-interval",
        "energy_read_interval",
        Kind.DURATION,
        None,
        "How often NVML's energy counter is read.",
        bounds=(0.0, HOUR),
        deprecated="--collector.field-interval energy-counter=SECONDS",
    ),
    Flag(
        "--collector.field-interval",
        "field_intervals",
        Kind.CUSTOM,
        None,
        "How often each class of fields, or one field, is read, as NAME=SECONDS; repeatable or "
        "comma-separated. A class: "
        + "; ".join(f"{c.name}={format_duration(c.default)}, {c.meaning}" for c in CLASS_INTERVALS)
        + ". A field's classic or 4.9 name, e.g. DCGM_FI_DEV_GPU_TEMP=30s, reads that field at "
        "most this often instead of on its class's interval (0s: every sweep); the energy "
        "counter's name sets energy-counter. Sampled, event and identity fields, and the clock "
        "event reasons the clock-event counts sample, have none.",
        read=field_intervals,
        metavar="NAME=SECONDS",
        repeatable=True,
        see="fields.md#read-cadence",
    ),
    Flag(
        "--collector.xid",
        "xid",
        Kind.SWITCH,
        True,
        "XID errors from NVML's event API.",
    ),
    Flag(
        "--collector.gpm",
        "gpm",
        Kind.SWITCH,
        True,
        "Profiling metrics (DCGM_FI_PROF_*) from NVML GPM, per GPU and per MIG instance, on GPUs "
        "that support it (Hopper and newer; others are skipped).",
    ),
    Flag(
        "--collector.processes",
        "processes",
        Kind.SWITCH,
        None,
        "Per-pod GPU memory and SM use on shared GPUs, from NVML's process accounting mapped to "
        "containers through /proc/<pid>/cgroup and the kubelet's log files. Needs the host's PID "
        "namespace (hostPID) or a host /proc at --processes.proc-root, and the host's /var/log "
        "read-only.",
        shown_default="off; on under --simulate",
        see="pods.md#per-pod-use-of-shared-gpus",
    ),
    Flag(
        "--processes.proc-root",
        "proc_root",
        Kind.TEXT,
        "/proc",
        "Where the host's /proc is, an absolute path (the default is right with hostPID).",
    ),
    Flag(
        "--processes.log-root",
        "log_root",
        Kind.TEXT,
        "/var/log",
        "Where the host's /var/log is mounted read-only, an absolute path.",
    ),
    Flag(
        "--collector.mig-refresh-interval",
        "mig_refresh",
        Kind.DURATION,
        60.0,
        "Re-read MIG topology this often, besides on every MigConfigChange event.",
        bounds=(1.0, DAY),
    ),
    Flag(
        "--snapshot.stale-after",
        "stale_after",
        Kind.DURATION,
        None,
        "The one bound on the served snapshot's age: past it kube_gpu_exporter_snapshot_stale "
        "turns 1, and past twice it (and at least 60s and 2 intervals) /healthz fails, so "
        "Kubernetes restarts a wedged exporter.",
        bounds=(0.1, DAY),
        shown_default="3 intervals",
        see="health.md",
    ),
    Flag(
        "--health.max-snapshot-age",
        "health_max_age",
        Kind.DURATION,
        None,
        "/healthz fails when no sweep finished for this long.",
        bounds=(1.0, DAY),
        deprecated="--snapshot.stale-after: /healthz fails at twice its age, and never sooner "
        "than 60s",
    ),
    Flag(
        "--health.require-gpus",
        "health_require_gpus",
        Kind.SWITCH,
        False,
        "/readyz fails while NVML answers with no GPU (dcgm-exporter's --health-require-gpus).",
        see="health.md",
    ),
    Flag(
        "--compat.dcgm-exporter",
        "dcgm_version",
        Kind.CHOICE,
        DEFAULT_VERSION.value,
        "Which dcgm-exporter release the DCGM series imitate: 4.8.2 (host label Hostname, NVLink "
        "bandwidth a counter), 4.8.3 (hostname, a gauge; what the current GPU Operator ships), "
        "4.8.4 (the same default scrape as 4.8.3) or 4.9 (a preview: no upstream release confirms "
        "its names yet; DCGM 4.7 names, base units, DCGM_FI_SYSTEM_DRIVER_VERSION).",
        choices=tuple(v.value for v in DcgmVersion),
        see="metrics.md#dcgm-exporter-versions",
    ),
    Flag(
        "--collectors",
        "collectors",
        Kind.TEXT,
        None,
        "dcgm-exporter's CSV of the DCGM fields to export (FIELD, type, help per line). Its types "
        "and HELP are used as given; DCGM fields this exporter cannot read are logged once and "
        "skipped; a name that is no DCGM field stops it. The driver-version label is attached "
        "only if the file lists DCGM_FI_DRIVER_VERSION (or --driver-version-label is given).",
        short="-f",
        metavar="FILE",
        shown_default="the built-in field set",
        see="fields.md#choosing-fields-with-a-dcgm-exporter-csv",
    ),
    Flag(
        "--xid-count-window-size",
        "xid_count_window_ms",
        Kind.CUSTOM,
        DEFAULT_COUNT_WINDOW_MS,
        "Window of DCGM_EXP_XID_ERRORS_COUNT, in milliseconds, when --collectors lists it "
        "(dcgm-exporter's default, 5 minutes).",
        read=window_ms,
        short="-x",
        metavar="MS",
        see="fields.md#windowed-counts-xid-errors-and-clock-events",
    ),
    Flag(
        "--clock-events-count-window-size",
        "clock_events_count_window_ms",
        Kind.CUSTOM,
        DEFAULT_COUNT_WINDOW_MS,
        "Window of DCGM_EXP_CLOCK_EVENTS_COUNT, in milliseconds, when --collectors lists it.",
        read=window_ms,
        metavar="MS",
    ),
    Flag(
        "--host-label",
        "host_label",
        Kind.CHOICE,
        None,
        "Host label on DCGM series: Hostname (dcgm-exporter up to 4.8.2), hostname (4.8.3 on) "
        "or none.",
        choices=tuple(h.value for h in HostLabel),
        shown_default="the --compat.dcgm-exporter release's",
    ),
    Flag(
        "--node-name",
        "node_name",
        Kind.TEXT,
        None,
        "Value of the host label; a valid Kubernetes node name.",
        shown_default="$NODE_NAME, else the host name",
    ),
    Flag(
        "--driver-version-label",
        "driver_label",
        Kind.CHOICE,
        None,
        "Name of the driver-version label on every DCGM series, or none. Always on "
        "kube_gpu_exporter_device_info.",
        choices=DRIVER_LABELS,
        shown_default="the --compat.dcgm-exporter release's (DCGM_FI_DRIVER_VERSION up to "
        "4.8.4, DCGM_FI_SYSTEM_DRIVER_VERSION in 4.9)",
    ),
    Flag(
        "--podresources",
        "podresources",
        Kind.SWITCH,
        True,
        "Attribute devices to pods through the kubelet pod-resources API.",
        see="pod-resources.md",
    ),
    Flag(
        "--podresources.socket",
        "podresources_socket",
        Kind.TEXT,
        "/var/lib/kubelet/pod-resources/kubelet.sock",
        "The kubelet pod-resources socket, an absolute path. Mount its directory, not the file: "
        "the kubelet recreates it.",
    ),
    Flag(
        "--podresources.extra-resources",
        "extra_resources",
        Kind.TEXT,
        "aliyun.com/gpu-mem",
        "Comma-separated device-plugin resources to count besides nvidia.com/gpu, "
        "nvidia.com/gpu.shared and nvidia.com/mig-*.",
    ),
    Flag(
        "--attribution.shared-devices",
        "shared_devices",
        Kind.CHOICE,
        "none",
        "Series of a device several containers share: no pod labels (none) or one copy per pod "
        "(per-pod). kube_gpu_exporter_pod_device_allocation lists every holder either way.",
        choices=("none", "per-pod"),
    ),
    Flag(
        "--attribution.per-pod-usage",
        "per_pod_usage",
        Kind.SWITCH,
        False,
        "With --attribution.shared-devices=per-pod and --collector.processes, each pod's copy of "
        "DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED carries that pod's own use, as "
        "dcgm-exporter's --kubernetes-virtual-gpus does. Sums over the copies miss unattributed "
        "processes and driver overhead.",
        see="pods.md#per-pod-use-of-shared-gpus",
    ),
    Flag(
        "--kubernetes",
        "kubernetes",
        Kind.SWITCH,
        False,
        "Enrich with the Kubernetes API: pod UIDs, owners, allow-listed pod labels and this "
        "node's GPU labels, from one watch of this node's pods (needs NODE_NAME). Under --simulate "
        "without --kubernetes.kubeconfig, the simulated node's pods and node come from a built-in "
        "fake API.",
    ),
    Flag(
        "--kubernetes.kubeconfig",
        "kubeconfig",
        Kind.TEXT,
        None,
        "kubeconfig to use instead of the in-cluster service account.",
        metavar="FILE",
        shown_default="in-cluster",
    ),
    Flag(
        "--kubernetes.pod-label-allowlist",
        "pod_label_allowlist",
        Kind.TEXT,
        None,
        "Regex of pod label keys to export as label_<name> on the allocation metric.",
        metavar="REGEX",
    ),
    Flag(
        "--kubernetes.resource-slices",
        "watch_resource_slices",
        Kind.SWITCH,
        True,
        "With --kubernetes, also watch this node's ResourceSlices (resource.k8s.io v1, or v1beta1 "
        "before Kubernetes 1.34): DRA devices then resolve by their uuid attribute and the "
        "devices NVIDIA's DRA driver offers count as allocatable (needs get, list and watch on "
        "resourceslices).",
        see="pods.md#gpus-allocated-through-dra",
    ),
    Flag(
        "--kubernetes.enable-pod-uid",
        "pod_uid_on_series",
        Kind.SWITCH,
        False,
        "Add pod_uid to every DCGM series of a device a pod holds, like dcgm-exporter's "
        "--kubernetes-enable-pod-uid (needs --kubernetes).",
    ),
    Flag(
        "--kubernetes.enable-pod-labels",
        "pod_labels_on_series",
        Kind.SWITCH,
        False,
        "Add the pod's labels (keys sanitised to [a-zA-Z0-9_], filtered by "
        "--kubernetes.pod-label-allowlist when given) to every DCGM series of a device it holds, "
        "like dcgm-exporter's --kubernetes-enable-pod-labels (needs --kubernetes); a key that "
        "would clash with a series label is dropped and counted.",
    ),
    Flag(
        "--kubernetes.max-pod-labels",
        "max_pod_labels",
        Kind.COUNT,
        10,
        "At most this many pod labels per pod; the rest are counted in "
        "kube_gpu_exporter_pod_labels_dropped_total and dropped.",
        bounds=(0, 100),
    ),
    Flag(
        "--log.level",
        "log_level",
        Kind.CHOICE,
        "info",
        "Log level.",
        choices=tuple(LEVELS),
    ),
    Flag(
        "--log.format",
        "log_format",
        Kind.CHOICE,
        "logfmt",
        "Log format, one event per line on stderr.",
        choices=("logfmt", "json"),
    ),
    Flag(
        "--simulate",
        "simulate",
        Kind.TEXT,
        None,
        "Run on a simulated GPU node instead of the NVIDIA driver: with no value the built-in "
        "8x H100 node; a built-in fleet by name (default, dra, mixed, gb200); or a YAML fleet "
        'file (a path containing "/" or ending in .yaml or .yml).',
        metavar="FLEET",
        optional_value=True,
        shown_default="off",
        see="simulator.md",
    ),
)

BY_NAME = {flag.name: flag for flag in FLAGS}
