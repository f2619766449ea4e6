"""Command line: Prometheus-exporter-style flags, each with an environment variable for DaemonSets.

Every flag `--a.b-c` can also be set as `KUBE_GPU_EXPORTER_A_B_C`; a flag on the command line wins.
A bad flag or value prints one line naming it and exits with status 2.

`kube-gpu-exporter hash-password` prints a bcrypt hash for --web.config.file instead of running.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, NoReturn

from exporter import __version__
from exporter.config import (
    DEFAULT_PORT,
    NODE_NAME,
    RESOURCE_NAME,
    AttributionConfig,
    CollectionConfig,
    Config,
    HostLabel,
    LabelConfig,
    SelectionFlags,
    WebConfig,
)
from exporter.dcgm_compat import DEFAULT_VERSION, PROFILES, DcgmVersion
from exporter.durations import DAY, HOUR, MINUTE, bounded_duration
from exporter.errors import ConfigurationError, one_line, quoted, quoted_path
from exporter.fields.flags import (
    DEFAULT_COUNT_WINDOW_MS,
    ENERGY_FIELD,
    UPSTREAM_ENV,
    field_intervals,
    log_selection,
    read_collectors,
    window_ms,
    with_selection,
)
from exporter.logs import LEVELS, configure_logging

if TYPE_CHECKING:
    from exporter.node_backend import NodeBackend

PROG = "kube-gpu-exporter"
HASH_PASSWORD = "hash-password"
ENV_PREFIX = "KUBE_GPU_EXPORTER_"
DRIVER_LABELS = ("none", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION")
# Each duration flag's range in seconds. The upper bounds are what a cluster admin could mean
# (poll and read intervals up to an hour, ages and refreshes up to a day) and keep every timer,
# Event.wait() and monotonic-clock sum built from them far below threading.TIMEOUT_MAX.
DURATION_BOUNDS: dict[str, tuple[float, float]] = {
    "--collector.interval": (0.1, HOUR),
    "--collector.device-timeout": (0.1, 10 * MINUTE),
    "--collector.pcie-interval": (1.0, HOUR),
    "--collector.slow-fields-interval": (0.0, HOUR),
    "--collector.energy-read-interval": (0.0, HOUR),
    "--collector.mig-refresh-interval": (1.0, DAY),
    "--snapshot.stale-after": (0.1, DAY),
    "--health.max-snapshot-age": (1.0, DAY),
}
log = logging.getLogger(__name__)


class UsageError(Exception):
    pass


def env_name(flag: str) -> str:
    return ENV_PREFIX + re.sub(r"[.-]", "_", flag.lstrip("-")).upper()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _duration(flag: str) -> Callable[[str], float]:
    return bounded_duration(*DURATION_BOUNDS[flag])


def _count(low: int, high: int):
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{quoted(text)} is not a whole number from {low} to {high}"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{quoted(text)} is out of range ({low} to {high})")
        return value

    return check


def _bool_env(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {quoted(text)} (use true or false)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="NVIDIA GPU exporter for Kubernetes with dcgm-exporter-compatible metrics. "
        f"Every flag can also be set through the environment variable {ENV_PREFIX}<FLAG>, "
        "e.g. --collector.interval as KUBE_GPU_EXPORTER_COLLECTOR_INTERVAL.",
        epilog=f"{PROG} {HASH_PASSWORD} [--cost N] reads a password and prints its bcrypt hash "
        "for --web.config.file's basic_auth_users.",
    )
    add = p.add_argument
    add(
        "--web.listen-address",
        dest="listen_address",
        default=f":{DEFAULT_PORT}",
        help=f"Address to listen on (default :{DEFAULT_PORT}; dcgm-exporter's 9400 stays free).",
    )
    add(
        "--web.config.file",
        dest="web_config_file",
        default=None,
        metavar="FILE",
        help="TLS and basic auth in the Prometheus exporter-toolkit format "
        "(tls_server_config, http_server_config, basic_auth_users).",
    )
    add(
        "--web.telemetry-path",
        dest="telemetry_path",
        default="/metrics",
        help="Path under which to expose metrics (default /metrics).",
    )
    add(
        "--web.max-connections",
        dest="max_connections",
        type=_count(1, 1_000_000),
        default=512,
        help="At most this many open HTTP connections (default 512); past it, a new connection "
        "closes the oldest idle one, so slow or stuck clients cannot lock Prometheus out.",
    )
    add(
        "--web.max-connections-per-address",
        dest="max_connections_per_address",
        type=_count(1, 1_000_000),
        default=None,
        metavar="N",
        help="At most this many open HTTP connections from one client address, an IPv6 /64 "
        "(default 64, or a quarter of a smaller --web.max-connections); past it, that "
        "address's new connection closes its own oldest idle one, never another client's.",
    )
    add(
        "--collector.interval",
        dest="interval",
        type=_duration("--collector.interval"),
        default=5.0,
        help="How often to poll NVML (default 5s). NVML refreshes utilization "
        "at most every 1/6 s to 1 s, so sub-second intervals only cost CPU.",
    )
    add(
        "--collector.device-timeout",
        dest="device_timeout",
        type=_duration("--collector.device-timeout"),
        default=10.0,
        help="A GPU whose read takes longer is reported stale (default 10s).",
    )
    add(
        "--collector.pcie",
        dest="pcie",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Sample PCIe TX/RX throughput (blocks 20 ms per direction per GPU; default on).",
    )
    add(
        "--collector.pcie-interval",
        dest="pcie_interval",
        type=_duration("--collector.pcie-interval"),
        default=15.0,
        help="How often to sample PCIe throughput (default 15s).",
    )
    add(
        "--collector.slow-fields-interval",
        dest="slow_fields_interval",
        type=_duration("--collector.slow-fields-interval"),
        default=10.0,
        help="Read the costly or slowly changing fields (the energy counter, 4 ms of CPU per "
        "read on an H200; the PCIe replay counter; ECC totals; row remapping; the NVLink "
        "counters; the power limit) at most this often, and, when Prometheus scrapes on a "
        "period, only in the sweep before a scrape (default 10s; 0s reads them every sweep).",
    )
    add(
        "--collector.energy-read-interval",
        dest="energy_read_interval",
        type=_duration("--collector.energy-read-interval"),
        default=60.0,
        help="Read NVML's total energy counter (4 ms of kernel CPU per read on an H200) at most "
        "this often, with the slow fields, and move the exported counter on by board power "
        "between reads, so that it rises on every scrape (default 60s; 0s reads it with every "
        "slow-field read and holds it in between).",
    )
    add(
        "--collector.field-interval",
        dest="field_intervals",
        type=field_intervals,
        action="append",
        default=None,
        metavar="NAME=SECONDS",
        help="Read one field at most this often instead of on its class's interval (e.g. "
        "DCGM_FI_DEV_GPU_TEMP=30s; 0s: every sweep); repeatable or comma-separated. NAME is a "
        "field's classic or 4.9 name; DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION's sets "
        "--collector.energy-read-interval. Sampled, event and identity fields, and the clock "
        "event reasons the clock-event counts sample, have none.",
    )
    add(
        "--collector.xid",
        dest="xid",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Watch NVML events for XID errors (default on).",
    )
    add(
        "--collector.gpm",
        dest="gpm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Profiling metrics (DCGM_FI_PROF_*) from NVML GPM, per GPU and per MIG instance, on "
        "GPUs that support it (Hopper and newer; others are skipped). Default on.",
    )
    add(
        "--collector.processes",
        dest="processes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Per-pod GPU memory and SM use on shared GPUs, from NVML's process accounting mapped "
        "to containers through /proc/<pid>/cgroup and the kubelet's log files. Needs the host's "
        "PID namespace (hostPID) or a host /proc at --processes.proc-root, and the host's "
        "/var/log read-only. Default off; on under --simulate.",
    )
    add(
        "--processes.proc-root",
        dest="proc_root",
        default="/proc",
        help="Where the host's /proc is (default /proc, right with hostPID).",
    )
    add(
        "--processes.log-root",
        dest="log_root",
        default="/var/log",
        help="Where the host's /var/log is mounted, read-only (default /var/log).",
    )
    add(
        "--collector.mig-refresh-interval",
        dest="mig_refresh",
        type=_duration("--collector.mig-refresh-interval"),
        default=60.0,
        help="Re-read MIG topology this often, besides on MIG change events (default 60s).",
    )
    add(
        "--snapshot.stale-after",
        dest="stale_after",
        type=_duration("--snapshot.stale-after"),
        default=None,
        help="Mark the served snapshot stale after this age (default 3 intervals).",
    )
    add(
        "--health.max-snapshot-age",
        dest="health_max_age",
        type=_duration("--health.max-snapshot-age"),
        default=60.0,
        help="/healthz fails when no sweep finished for this long, so Kubernetes "
        "restarts a wedged exporter (default 60s).",
    )
    add(
        "--health.require-gpus",
        dest="health_require_gpus",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="/readyz fails while NVML answers with no GPU (dcgm-exporter's "
        "--health-require-gpus; also DCGM_EXPORTER_HEALTH_REQUIRE_GPUS).",
    )
    add(
        "--compat.dcgm-exporter",
        dest="dcgm_version",
        choices=[v.value for v in DcgmVersion],
        default=DEFAULT_VERSION.value,
        help="Which dcgm-exporter release the DCGM series imitate: 4.8.2 (host label Hostname, "
        "NVLink bandwidth a counter), 4.8.3 (hostname, a gauge; default, what the current GPU "
        "Operator ships), 4.8.4 (the same default scrape as 4.8.3) or 4.9 (a preview: no "
        "upstream release confirms its names yet; DCGM 4.7 names, base units, "
        "DCGM_FI_SYSTEM_DRIVER_VERSION).",
    )
    add(
        "--collectors",
        "-f",
        dest="collectors",
        default=None,
        metavar="FILE",
        help="dcgm-exporter's CSV of the DCGM fields to export (FIELD, type, help per line; also "
        "from DCGM_EXPORTER_COLLECTORS). Its types and HELP are used as given; DCGM fields this "
        "exporter cannot read are logged once and skipped; a name that is no DCGM field stops "
        "it. The driver-version label is attached only if the file lists DCGM_FI_DRIVER_VERSION "
        "(or --driver-version-label is given). Default: the built-in field set.",
    )
    add(
        "--xid-count-window-size",
        "-x",
        dest="xid_count_window_ms",
        type=window_ms,
        default=DEFAULT_COUNT_WINDOW_MS,
        metavar="MS",
        help="Window of DCGM_EXP_XID_ERRORS_COUNT, in milliseconds, when --collectors lists it "
        f"(default {DEFAULT_COUNT_WINDOW_MS}, 5 minutes; also from "
        "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE).",
    )
    add(
        "--clock-events-count-window-size",
        dest="clock_events_count_window_ms",
        type=window_ms,
        default=DEFAULT_COUNT_WINDOW_MS,
        metavar="MS",
        help="Window of DCGM_EXP_CLOCK_EVENTS_COUNT, in milliseconds, when --collectors lists it "
        f"(default {DEFAULT_COUNT_WINDOW_MS}, 5 minutes; also from "
        "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE).",
    )
    add(
        "--host-label",
        dest="host_label",
        choices=[h.value for h in HostLabel],
        default=None,
        help="Host label on DCGM series: Hostname (dcgm-exporter <= 4.8.2), hostname "
        "(>= 4.8.3) or none. Default: the --compat.dcgm-exporter release's.",
    )
    add(
        "--node-name",
        dest="node_name",
        default=None,
        help="Value of the host label (default: $NODE_NAME, else the host name).",
    )
    add(
        "--driver-version-label",
        dest="driver_label",
        choices=DRIVER_LABELS,
        default=None,
        help="Name of the driver-version label on every DCGM series, or none. Default: the "
        "--compat.dcgm-exporter release's (DCGM_FI_DRIVER_VERSION up to 4.8.3, "
        "DCGM_FI_SYSTEM_DRIVER_VERSION in 4.9). Always on kube_gpu_exporter_device_info.",
    )
    add(
        "--podresources",
        dest="podresources",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Attribute devices to pods through the kubelet pod-resources API (default on).",
    )
    add(
        "--podresources.socket",
        dest="podresources_socket",
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        help="The kubelet pod-resources socket (default /var/lib/kubelet/pod-resources/"
        "kubelet.sock). Mount its directory, not the file: the kubelet recreates it.",
    )
    add(
        "--podresources.extra-resources",
        dest="extra_resources",
        default="aliyun.com/gpu-mem",
        help="Comma-separated device-plugin resources to count besides nvidia.com/gpu, "
        "nvidia.com/gpu.shared and nvidia.com/mig-* (default aliyun.com/gpu-mem).",
    )
    add(
        "--attribution.shared-devices",
        dest="shared_devices",
        choices=["none", "per-pod"],
        default="none",
        help="Series of a device several containers share: no pod labels "
        "(none, default) or one copy per pod (per-pod). kube_gpu_exporter_pod_device_allocation "
        "lists every holder either way.",
    )
    add(
        "--attribution.per-pod-usage",
        dest="per_pod_usage",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="With --attribution.shared-devices=per-pod and --collector.processes, each pod's copy "
        "of DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED carries that pod's own use, as "
        "dcgm-exporter's --kubernetes-virtual-gpus does. Sums over the copies miss unattributed "
        "processes and driver overhead (default off).",
    )
    add(
        "--kubernetes",
        dest="kubernetes",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Enrich with the Kubernetes API: pod UIDs, owners, allow-listed pod labels and this "
        "node's GPU labels, from one watch of this node's pods (default off; needs NODE_NAME). "
        "Under --simulate without --kubernetes.kubeconfig, the simulated node's pods and node "
        "come from a built-in fake API.",
    )
    add(
        "--kubernetes.kubeconfig",
        dest="kubeconfig",
        default=None,
        help="kubeconfig to use instead of the in-cluster service account.",
    )
    add(
        "--kubernetes.pod-label-allowlist",
        dest="pod_label_allowlist",
        default=None,
        help="Regex of pod label keys to export as label_<name> on the allocation metric.",
    )
    add(
        "--kubernetes.resource-slices",
        dest="watch_resource_slices",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="With --kubernetes, also watch this node's ResourceSlices (resource.k8s.io v1, or "
        "v1beta1 before Kubernetes 1.34): DRA devices then resolve by their uuid attribute and "
        "the devices NVIDIA's DRA driver offers count as allocatable (default on; needs get, list "
        "and watch on resourceslices).",
    )
    add(
        "--kubernetes.enable-pod-uid",
        dest="pod_uid_on_series",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Add pod_uid to every DCGM series of a device a pod holds, like dcgm-exporter's "
        "--kubernetes-enable-pod-uid (default off; needs --kubernetes).",
    )
    add(
        "--kubernetes.enable-pod-labels",
        dest="pod_labels_on_series",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Add the pod's labels (keys sanitised to [a-zA-Z0-9_], filtered by "
        "--kubernetes.pod-label-allowlist when given) to every DCGM series of a device it holds, "
        "like dcgm-exporter's --kubernetes-enable-pod-labels (default off; needs --kubernetes).",
    )
    add(
        "--kubernetes.max-pod-labels",
        dest="max_pod_labels",
        type=_count(0, 100),
        default=10,
        help="At most this many pod labels per pod; the rest are counted and dropped.",
    )
    add(
        "--log.level",
        dest="log_level",
        choices=list(LEVELS),
        default="info",
        help="Log level (default info).",
    )
    add(
        "--log.format",
        dest="log_format",
        choices=["logfmt", "json"],
        default="logfmt",
        help="Log format (default logfmt).",
    )
    add(
        "--simulate",
        dest="simulate",
        nargs="?",
        const="",
        default=None,
        metavar="FLEET",
        help="Run on a simulated GPU node instead of the NVIDIA driver: with no value the "
        "built-in 8x H100 node; a built-in fleet by name (default, dra, mixed); or a YAML fleet "
        'file (a path containing "/" or ending in .yaml or .yml).',
    )
    add("--version", action="version", version=f"{PROG} {__version__}")
    return p


def build_hash_password_parser() -> argparse.ArgumentParser:
    from exporter.password_hash import DEFAULT_COST, MAX_COST, MIN_COST

    p = _Parser(
        prog=f"{PROG} {HASH_PASSWORD}",
        description="Print the bcrypt hash of a password, for basic_auth_users in "
        "--web.config.file. On a terminal the password is asked twice without echo; otherwise "
        "the first line of standard input is read.",
    )
    p.add_argument(
        "--cost",
        type=_count(MIN_COST, MAX_COST),
        default=DEFAULT_COST,
        help=f"bcrypt cost (default {DEFAULT_COST}; each step doubles the time of every check)",
    )
    return p


def hash_password_main(argv: Sequence[str]) -> int:
    from exporter.password_hash import PasswordError, hash_password, read_password

    try:
        args = build_hash_password_parser().parse_args(argv)
        print(hash_password(read_password(sys.stdin), args.cost))
    except (UsageError, PasswordError) as exc:
        return _usage_error(f"{HASH_PASSWORD}: {exc}")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        return 130
    return 0


def _apply_environment(
    parser: argparse.ArgumentParser, argv: Sequence[str], environ: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """Turn KUBE_GPU_EXPORTER_* variables into flags placed before argv, so argv wins.

    Returns the flags and, for error messages, which variable each flag came from.
    """
    given = _given_flags(parser, argv)
    prefix: list[str] = []
    sources: dict[str, str] = {}
    for action in parser._actions:
        flags = [
            f for f in action.option_strings if f.startswith("--") and not f.startswith("--no-")
        ]
        if not flags or action.dest in ("help", "version"):
            continue
        flag = flags[0]
        variable = env_name(flag)
        value = environ.get(variable)
        if value is None and flag in UPSTREAM_ENV:
            variable = UPSTREAM_ENV[flag]
            value = environ.get(variable)
        if value is None or flag in given or f"--no-{flag[2:]}" in given:
            continue
        sources[flag] = variable
        if isinstance(action, argparse.BooleanOptionalAction):
            try:
                enabled = _bool_env(value)
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"environment {variable}: {exc}") from None
            prefix.append(flag if enabled else f"--no-{flag[2:]}")
        elif flag == "--simulate":
            if _bool_env_or_none(value) is not False:
                prefix.append(flag if _bool_env_or_none(value) else f"{flag}={value}")
        else:
            prefix.append(f"{flag}={value}")
    return prefix, sources


def _given_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The long flags argv sets, counting short aliases (-f FILE, -x5) as their long flag."""
    long_of: dict[str, str] = {}
    for action in parser._actions:
        longs = [f for f in action.option_strings if f.startswith("--")]
        for option in action.option_strings:
            if longs and not option.startswith("--"):
                long_of[option] = longs[0]
    given: set[str] = set()
    for arg in argv:
        if arg.startswith("--"):
            given.add(arg.split("=", 1)[0])
        elif arg[:2] in long_of:
            given.add(long_of[arg[:2]])
    return given


def _bool_env_or_none(text: str) -> bool | None:
    try:
        return _bool_env(text)
    except argparse.ArgumentTypeError:
        return None


def parse_config(argv: Sequence[str], environ: dict[str, str] | None = None) -> Config:
    environ = dict(os.environ) if environ is None else environ
    parser = build_parser()
    from_env, sources = _apply_environment(parser, argv, environ)
    try:
        args = parser.parse_args([*from_env, *argv])
    except UsageError as exc:
        message = str(exc)
        for flag, variable in sources.items():
            # argparse names a flag with a short alias as "--long/-s".
            if message.startswith((f"argument {flag}:", f"argument {flag}/")):
                message = f"environment variable {variable}: {message.split(':', 1)[1].strip()}"
        raise UsageError(message) from None
    if not args.telemetry_path.startswith("/") or any(c.isspace() for c in args.telemetry_path):
        raise UsageError(
            f"argument --web.telemetry-path: {quoted(args.telemetry_path)} must start "
            "with / and contain no spaces"
        )
    if args.telemetry_path in ("/healthz", "/readyz", "/health"):
        raise UsageError(f"argument --web.telemetry-path: {args.telemetry_path} is reserved")
    from exporter.server import split_listen_address

    try:
        split_listen_address(args.listen_address)
    except ValueError as exc:
        raise UsageError(f"argument --web.listen-address: {exc}") from None
    node_name = args.node_name or environ.get("NODE_NAME") or ""
    if node_name and not NODE_NAME.match(node_name):
        source = "argument --node-name" if args.node_name else "environment variable NODE_NAME"
        raise UsageError(f"{source}: {quoted(node_name)} is not a valid Kubernetes node name")
    for flag, path in (
        ("--podresources.socket", args.podresources_socket),
        ("--processes.proc-root", args.proc_root),
        ("--processes.log-root", args.log_root),
    ):
        if not os.path.isabs(path):
            raise UsageError(f"argument {flag}: {quoted_path(path)} is not an absolute path")
    extra_resources = frozenset(r.strip() for r in args.extra_resources.split(",") if r.strip())
    for name in sorted(extra_resources):
        if not RESOURCE_NAME.match(name):
            raise UsageError(
                f"argument --podresources.extra-resources: {quoted(name)} is not a resource name "
                "like vendor.com/gpu-mem"
            )
    if args.kubeconfig is not None:
        _check_kubeconfig(args.kubeconfig)
    if args.pod_label_allowlist is not None:
        try:
            re.compile(args.pod_label_allowlist)
        except re.error as exc:
            raise UsageError(
                f"argument --kubernetes.pod-label-allowlist: invalid regex: {exc}"
            ) from None
    for flag, enabled in (
        ("--kubernetes.enable-pod-uid", args.pod_uid_on_series),
        ("--kubernetes.enable-pod-labels", args.pod_labels_on_series),
    ):
        if enabled and not args.kubernetes:
            raise UsageError(f"{flag} needs --kubernetes: pod UIDs and labels come from the API")
    if args.kubernetes and not node_name and args.simulate is None:
        raise UsageError("--kubernetes needs the node name: set NODE_NAME or --node-name")
    if args.kubernetes and importlib.util.find_spec("kubernetes") is None:
        raise UsageError(
            "--kubernetes needs the kubernetes client, which this installation lacks "
            "(an image built with WITH_KUBERNETES=false): use the default image"
        )
    attribution = AttributionConfig(
        podresources_enabled=args.podresources,
        socket_path=args.podresources_socket,
        extra_resources=extra_resources,
        kubernetes_enabled=args.kubernetes,
        kubeconfig=args.kubeconfig,
        pod_label_allowlist=args.pod_label_allowlist,
        max_pod_labels=args.max_pod_labels,
        watch_resource_slices=args.watch_resource_slices,
    )
    try:
        # Without --collectors, a built-in --simulate fleet may bring its own (applied by the
        # simulated backend, exporter/simulator/node.py).
        fields = read_collectors(args.collectors)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    intervals = dict(pair for group in args.field_intervals or () for pair in group)
    energy_read_interval = intervals.pop(ENERGY_FIELD, args.energy_read_interval)
    collection = CollectionConfig(
        interval_seconds=args.interval,
        device_timeout_seconds=args.device_timeout,
        pcie_enabled=args.pcie,
        pcie_interval_seconds=args.pcie_interval,
        slow_fields_interval_seconds=args.slow_fields_interval,
        energy_read_interval_seconds=energy_read_interval,
        xid_enabled=args.xid,
        gpm_enabled=args.gpm,
        mig_refresh_seconds=args.mig_refresh,
        processes_enabled=args.simulate is not None if args.processes is None else args.processes,
        proc_root=args.proc_root,
        log_root=args.log_root,
        field_intervals=tuple(intervals.items()),
    )
    security = None
    if args.web_config_file:
        from exporter.webconfig.parse import load_web_config

        try:
            security = load_web_config(args.web_config_file)
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
    web = WebConfig(
        security=security,
        listen_address=args.listen_address,
        telemetry_path=args.telemetry_path,
        max_connections=args.max_connections,
        max_connections_per_address=args.max_connections_per_address,
        stale_after_seconds=args.stale_after or 3 * args.interval,
        health_max_age_seconds=max(args.health_max_age, 2 * args.interval),
        health_require_gpus=args.health_require_gpus,
    )
    dcgm = PROFILES[DcgmVersion(args.dcgm_version)]
    driver_label = dcgm.driver_label if args.driver_label is None else args.driver_label
    labels = LabelConfig(
        host_label=HostLabel(args.host_label or dcgm.host_label),
        node_name=node_name,
        driver_version_label="" if driver_label == "none" else driver_label,
        shared_device_series=args.shared_devices,
        per_pod_usage=args.per_pod_usage,
        dcgm=dcgm,
        pod_uid_on_series=args.pod_uid_on_series,
        pod_labels_on_series=args.pod_labels_on_series,
    )
    config = Config(
        collection=collection,
        labels=labels,
        web=web,
        attribution=attribution,
        selection_flags=SelectionFlags(
            xid_count_window_ms=args.xid_count_window_ms,
            clock_events_count_window_ms=args.clock_events_count_window_ms,
            driver_label=args.driver_label,
        ),
        simulate=args.simulate is not None,
        fleet_file=args.simulate or None,
        log_level=args.log_level,
        log_format=args.log_format,
    )
    return config if fields is None else with_selection(config, fields)


def _usage_error(message: str) -> int:
    # Values are quoted where messages are made; argparse's own ("unrecognized arguments: ...")
    # are not, and whatever slipped through must still not end the line.
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr)
    return 2


# kubeconfigs with embedded certificates for many clusters reach a few hundred KB.
MAX_KUBECONFIG_BYTES = 4 << 20


def _check_kubeconfig(path: str) -> None:
    """The kubernetes library reads and parses the whole file with no limit, so a FIFO would block
    its thread for good and /dev/zero fill memory: refuse both here, with one line."""
    from pathlib import Path

    from exporter import small_yaml

    try:
        small_yaml.load(small_yaml.read_text(Path(path), MAX_KUBECONFIG_BYTES))
    except small_yaml.YamlRefused as exc:
        raise UsageError(f"argument --kubernetes.kubeconfig: {quoted_path(path)}: {exc}") from None


def node_backend(config: Config) -> AbstractContextManager[NodeBackend]:
    """The node to run on: this host's GPUs, or with --simulate the simulated node. The only
    place that names the simulator, imported here alone so that production never loads it."""
    if config.simulate:
        try:
            from exporter.simulator.node import simulated_backend
        except ModuleNotFoundError as exc:
            if exc.name != "grpc":
                raise
            raise ConfigurationError(
                "--simulate needs the simulator's extra dependencies, which this install lacks: "
                "pip install 'kube-gpu-exporter[simulator]'"
            ) from None
        return simulated_backend(config)
    from exporter.real_node import real_backend

    return real_backend(config)


def main(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """Run the exporter; the exit status: 0, or 2 after one line on stderr for bad input.

    `argv` and `environ` default to the process's own; tests pass theirs to run in-process.
    """
    argv = sys.argv[1:] if argv is None else argv
    if list(argv[:1]) == [HASH_PASSWORD]:
        return hash_password_main(argv[1:])
    try:
        config = parse_config(argv, environ)
    except UsageError as exc:
        return _usage_error(str(exc))
    except SystemExit as exc:
        # argparse ends --help and --version this way, after printing what was asked for.
        return exc.code if isinstance(exc.code, int) else 0
    configure_logging(config.log_level, config.log_format)
    # Logged only now, in the chosen format; a bad file has already failed with one line.
    for warning in config.web.security.warnings if config.web.security else ():
        log.warning(warning)
    log_selection(config.fields)
    from exporter.app import ignore_stray_signals, run

    ignore_stray_signals()
    try:
        return run(node_backend(config), config.web.listen_address)
    except ConfigurationError as exc:
        return _usage_error(str(exc))
    except KeyboardInterrupt:
        return 0
