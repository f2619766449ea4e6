"""dcgm-exporter's flags and environment variables, one row each: what to give this exporter
instead, and whether the variable is honoured. The GPU Operator configures dcgm-exporter through
these variables, so a DaemonSet moved over keeps its settings where the meaning is the same; a
variable whose meaning differs is logged once instead of being read as something else.

docs/dcgm-exporter-compatibility.md's flag table is made from these rows (docs_table.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Upstream:
    """One dcgm-exporter flag (or a group of them meaning one thing)."""

    flags: tuple[str, ...]
    # Its environment variable, "" where none is known.
    env: str
    # Ours, as the docs say it: a flag, "not needed" or "not supported".
    here: str
    note: str
    # The flag of ours the variable sets, and the value it gives it; None: not honoured (a set
    # variable is logged once). `translate` returning None sets nothing.
    flag: str | None = None
    translate: Callable[[str], str | bool | None] | None = None
    # The dcgm-exporter release that added the flag, where later than 4.8.2.
    since: str = ""


def _same(value: str) -> str:
    return value


def _milliseconds(value: str) -> str:
    # dcgm-exporter's interval is whole milliseconds; ours is a duration.
    return f"{value.strip()}ms" if value.strip().isdigit() else value


def _true_then(ours: str) -> Callable[[str], str | None]:
    def translate(value: str) -> str | None:
        return ours if value.strip().lower() in ("1", "true", "yes", "on") else None

    return translate


def _log_format(value: str) -> str:
    # dcgm-exporter's "text" is Go's key=value handler, which is logfmt.
    return "logfmt" if value.strip().lower() == "text" else value


UPSTREAM: tuple[Upstream, ...] = (
    Upstream(
        ("-f", "--collectors"),
        "DCGM_EXPORTER_COLLECTORS",
        "`-f`, `--collectors FILE`",
        "the same CSV; without it, our default fields rather than "
        "/etc/dcgm-exporter/default-counters.csv",
        "--collectors",
        _same,
    ),
    Upstream(
        ("-a", "--address"),
        "DCGM_EXPORTER_LISTEN",
        "`--web.listen-address`",
        "the same address; our default is :9455, so both run side by side during a migration",
        "--web.listen-address",
        _same,
    ),
    Upstream(
        ("-c", "--collect-interval"),
        "DCGM_EXPORTER_INTERVAL",
        "`--collector.interval`",
        "upstream's whole milliseconds are read as such; ours takes a duration (5s), and "
        "upstream's default is 30000 ms",
        "--collector.interval",
        _milliseconds,
    ),
    Upstream(
        ("-k", "--kubernetes"),
        "DCGM_EXPORTER_KUBERNETES",
        "`--[no-]podresources`",
        "pod labels from the kubelet, on by default. Our --kubernetes is something else: pod "
        "UIDs, owners and labels from the API server",
        "--podresources",
        _same,
    ),
    Upstream(
        ("--kubernetes-enable-pod-labels",),
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
        "`--kubernetes.enable-pod-labels`",
        "needs --kubernetes",
        "--kubernetes.enable-pod-labels",
        _same,
    ),
    Upstream(
        ("--kubernetes-enable-pod-uid",),
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
        "`--kubernetes.enable-pod-uid`",
        "needs --kubernetes",
        "--kubernetes.enable-pod-uid",
        _same,
    ),
    Upstream(
        ("--kubernetes-pod-label-allowlist-regex",),
        "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        "`--kubernetes.pod-label-allowlist`",
        "one regex rather than a comma-separated list of them, so the variable is not read: "
        "a comma may belong to a regex",
    ),
    Upstream(
        ("--kubernetes-gpu-id-type",),
        "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",
        "not needed",
        "both device-ID forms (UUIDs and GKE's nvidiaN) are understood at once",
    ),
    Upstream(
        ("--kubernetes-virtual-gpus",),
        "KUBERNETES_VIRTUAL_GPUS",
        "`--attribution.shared-devices=per-pod`",
        "with --attribution.per-pod-usage for each pod's own utilization and memory",
        "--attribution.shared-devices",
        _true_then("per-pod"),
    ),
    Upstream(
        ("--health-require-gpus",),
        "DCGM_EXPORTER_HEALTH_REQUIRE_GPUS",
        "`--health.require-gpus`",
        "off by default; /readyz fails while NVML answers with no GPU",
        "--health.require-gpus",
        _same,
        since="4.8.3",
    ),
    Upstream(
        ("--kubernetes-enable-dra",),
        "KUBERNETES_ENABLE_DRA",
        "not needed",
        "DRA claims in the kubelet's answer are attributed whenever --podresources is on",
    ),
    Upstream(
        ("--nvidia-resource-names",),
        "NVIDIA_RESOURCE_NAMES",
        "`--podresources.extra-resources`",
        "more device-plugin resources to count, comma-separated",
        "--podresources.extra-resources",
        _same,
    ),
    Upstream(
        ("--pod-resources-kubelet-socket",),
        "DCGM_POD_RESOURCES_KUBELET_SOCKET",
        "`--podresources.socket`",
        "the same socket",
        "--podresources.socket",
        _same,
    ),
    Upstream(
        ("-n", "--no-hostname"),
        "DCGM_EXPORTER_NO_HOSTNAME",
        "`--host-label=none`",
        "true leaves the host label out",
        "--host-label",
        _true_then("none"),
    ),
    Upstream(
        ("--web-config-file",),
        "DCGM_EXPORTER_WEB_CONFIG_FILE",
        "`--web.config.file`",
        "the same exporter-toolkit format",
        "--web.config.file",
        _same,
    ),
    Upstream(
        ("-x", "--xid-count-window-size"),
        "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
        "`-x`, `--xid-count-window-size MS`",
        "the same, for DCGM_EXP_XID_ERRORS_COUNT",
        "--xid-count-window-size",
        _same,
    ),
    Upstream(
        ("--clock-events-count-window-size",),
        "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
        "`--clock-events-count-window-size MS`",
        "the same, for DCGM_EXP_CLOCK_EVENTS_COUNT",
        "--clock-events-count-window-size",
        _same,
    ),
    Upstream(
        ("--log-format",),
        "DCGM_EXPORTER_LOG_FORMAT",
        "`--log.format`",
        "upstream's text is our logfmt; json is json",
        "--log.format",
        _log_format,
    ),
    Upstream(
        ("--debug",),
        "DCGM_EXPORTER_DEBUG",
        "`--log.level=debug`",
        "true logs at debug level",
        "--log.level",
        _true_then("debug"),
    ),
    Upstream(
        ("--config-file",),
        "",
        "`--config.file`",
        "a YAML file of flags too, but keyed by our flag names: upstream's version 1 and 2 "
        "schemas are not read",
        since="4.8.3",
    ),
    Upstream(
        ("--web-read-timeout", "--web-write-timeout"),
        "",
        "not needed",
        "a request's line and headers must arrive within the 60 s keep-alive and 16 KiB, a TLS "
        "handshake within 5 s, and each response is a body rendered once per sweep, so a slow "
        "reader holds one connection and no work (faults.md, HTTP)",
        since="4.8.3",
    ),
    Upstream(
        ("--max-concurrent-scrapes",),
        "",
        "`--web.max-connections`",
        "every scrape is answered from the bytes rendered once per sweep, so concurrent scrapes "
        "cost no collection; connections are capped in total and per client address",
        since="4.8.4",
    ),
    Upstream(
        ("--enable-exporter-metrics",),
        "DCGM_EXPORTER_ENABLE_EXPORTER_METRICS",
        "not needed",
        "the exporter's own kube_gpu_exporter_* families (sweep time, NVML errors, scrapes, "
        "collector success) are always served; there is no Go runtime to report",
        since="4.8.4",
    ),
    Upstream(
        ("--container-labels", "--container-runtime-socket"),
        "",
        "not supported",
        "pods and containers come from the kubelet's pod-resources API and process accounting; "
        "the container runtime is not asked",
        since="4.8.3",
    ),
    Upstream(
        ("--fake-gpus",),
        "DCGM_EXPORTER_USE_FAKE_GPUS",
        "`--simulate`",
        "a whole simulated node rather than DCGM's fake GPUs, so the variable is not read",
    ),
    Upstream(
        ("-r", "--remote-hostengine-info"),
        "DCGM_REMOTE_HOSTENGINE_INFO",
        "not needed",
        "no DCGM host engine: NVML is read in process",
    ),
    Upstream(
        ("--enable-dcgm-log", "--dcgm-log-level"),
        "DCGM_EXPORTER_ENABLE_DCGM_LOG",
        "not needed",
        "no DCGM; NVML's errors are logged and counted in kube_gpu_exporter_nvml_errors_total",
    ),
    Upstream(
        ("--disable-startup-validate",),
        "DISABLE_STARTUP_VALIDATE",
        "not needed",
        "nothing to validate without DCGM; a missing driver is served as "
        "kube_gpu_exporter_nvml_up 0",
    ),
    Upstream(
        ("--enable-gpu-bind-unbind-watch", "--gpu-bind-unbind-poll-interval"),
        "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",
        "not needed",
        "a GPU that is lost or comes back is noticed by the sweep",
    ),
    Upstream(
        ("-d", "--devices"),
        "DCGM_EXPORTER_DEVICES_STR",
        "not supported",
        "every GPU is exported, and a MIG-enabled one through its instances: upstream's default, f",
    ),
    Upstream(
        ("-s", "--switch-devices", "-p", "--cpu-devices"),
        "DCGM_EXPORTER_OTHER_DEVICES_STR",
        "not supported",
        "NVSwitch and CPU metrics come from DCGM; this exporter serves GPUs only",
    ),
    Upstream(
        ("-m", "--configmap-data"),
        "DCGM_EXPORTER_CONFIGMAP_DATA",
        "not supported",
        "mount the ConfigMap as a file and give it to --collectors (the chart's collectors value "
        "does)",
    ),
    Upstream(
        ("-o", "--use-old-namespace"),
        "DCGM_EXPORTER_USE_OLD_NAMESPACE",
        "not supported",
        "dcgm-exporter 1.x's names predate every profile we imitate",
    ),
    Upstream(
        ("--replace-blanks-in-model-name",),
        "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME",
        "not supported",
        "modelName keeps NVML's name, spaces included, as upstream's default does",
    ),
    Upstream(
        ("--hpc-job-mapping-dir",),
        "DCGM_HPC_JOB_MAPPING_DIR",
        "not supported",
        "jobs are attributed through Kubernetes only",
    ),
    Upstream(
        ("--dump-enabled", "--dump-directory", "--dump-retention", "--dump-compression"),
        "DCGM_EXPORTER_DUMP_ENABLED",
        "not supported",
        "dumps of DCGM's state; --log.level=debug and /metrics show ours",
    ),
    Upstream(
        ("--enable-pprof",),
        "DCGM_EXPORTER_ENABLE_PPROF",
        "not supported",
        "Go's profiler endpoints; the exporter is Python",
    ),
    Upstream(
        ("--web-systemd-socket",),
        "DCGM_EXPORTER_SYSTEMD_SOCKET",
        "not supported",
        "the exporter binds its own socket",
    ),
)

UPSTREAM_ENV = tuple(row for row in UPSTREAM if row.env)
