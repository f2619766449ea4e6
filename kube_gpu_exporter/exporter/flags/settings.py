"""The exporter's configuration from its flags: the parsed command line, environment and config
file (sources.py) checked and turned into Config. A row of the flag table is read here by its
`dest`; checks that span flags (one needs another) live here too."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
from collections.abc import Sequence

from kube_gpu_exporter.exporter.config import (
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
from kube_gpu_exporter.exporter.dcgm_compat import PROFILES, DcgmVersion
from kube_gpu_exporter.exporter.errors import ConfigurationError, quoted, quoted_path
from kube_gpu_exporter.exporter.fields.flags import (
    CLASS_BY_NAME,
    CLASS_INTERVALS,
    ENERGY_FIELD,
    read_collectors,
)
from kube_gpu_exporter.exporter.flags.parser import UsageError, build_parser
from kube_gpu_exporter.exporter.flags.selection import with_selection
from kube_gpu_exporter.exporter.flags.sources import layered, with_source
from kube_gpu_exporter.exporter.flags.table import FLAGS

# /healthz fails once the snapshot has been stale for as long again as it took to go stale, and
# never sooner than a minute: a restart loses the learnt scrape schedule and the counters' state,
# so one slow NVML call must not cost it.
HEALTHZ_STALE_FACTOR = 2
HEALTHZ_FLOOR_SECONDS = 60.0


def _first(*values: float | None) -> float:
    """The first value given: a class's interval, then the deprecated flag's, then the default."""
    return next(v for v in values if v is not None)


def _deprecated(args: argparse.Namespace) -> list[str]:
    return [
        f"{flag.name} is deprecated and goes in the next release: use {flag.deprecated}"
        for flag in FLAGS
        if flag.deprecated and getattr(args, flag.dest) is not None
    ]


def parse_config(argv: Sequence[str], environ: dict[str, str] | None = None) -> Config:
    """The configuration the command line, the environment and the --config.file give, checked:
    UsageError with one line naming the flag, variable or file key on anything wrong."""
    environ = dict(os.environ) if environ is None else environ
    parser = build_parser()
    sources = layered(argv, environ)
    try:
        args = parser.parse_args([*sources.arguments, *argv])
    except UsageError as exc:
        raise UsageError(with_source(str(exc), sources.sources)) from None
    if not args.telemetry_path.startswith("/") or any(c.isspace() for c in args.telemetry_path):
        raise UsageError(
            f"argument --web.telemetry-path: {quoted(args.telemetry_path)} must start "
            "with / and contain no spaces"
        )
    if args.telemetry_path in ("/healthz", "/readyz", "/health"):
        raise UsageError(f"argument --web.telemetry-path: {args.telemetry_path} is reserved")
    from kube_gpu_exporter.exporter.server import split_listen_address

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
            given = sources.sources.get(flag, flag)
            raise UsageError(f"{given} needs --kubernetes: pod UIDs and labels come from the API")
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
        # simulated backend, kube_gpu_exporter/exporter/simulator/node.py).
        fields = read_collectors(args.collectors)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    intervals = dict(pair for group in args.field_intervals or () for pair in group)
    classes = {c.name: intervals.pop(c.name, None) for c in CLASS_INTERVALS}
    energy_field = intervals.pop(ENERGY_FIELD, None)
    slow_fields_interval = _first(
        classes["slow-fields"], args.slow_fields_interval, CLASS_BY_NAME["slow-fields"].default
    )
    # The energy counter is its class's only field, and a field's own interval beats its class's.
    energy_read_interval = _first(
        energy_field,
        classes["energy-counter"],
        args.energy_read_interval,
        CLASS_BY_NAME["energy-counter"].default,
    )
    pcie_interval = _first(
        classes["pcie-sampler"], args.pcie_interval, CLASS_BY_NAME["pcie-sampler"].default
    )
    collection = CollectionConfig(
        interval_seconds=args.interval,
        device_timeout_seconds=args.device_timeout,
        pcie_enabled=args.pcie,
        pcie_interval_seconds=pcie_interval,
        slow_fields_interval_seconds=slow_fields_interval,
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
        from kube_gpu_exporter.exporter.webconfig.parse import load_web_config

        try:
            security = load_web_config(args.web_config_file)
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
    stale_after = args.stale_after or 3 * args.interval
    health_max_age = _first(
        args.health_max_age, max(HEALTHZ_FLOOR_SECONDS, HEALTHZ_STALE_FACTOR * stale_after)
    )
    web = WebConfig(
        security=security,
        listen_address=args.listen_address,
        telemetry_path=args.telemetry_path,
        max_connections=args.max_connections,
        max_connections_per_address=args.max_connections_per_address,
        stale_after_seconds=stale_after,
        health_max_age_seconds=max(health_max_age, 2 * args.interval),
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
        notices=(*sources.notices, *_deprecated(args)),
    )
    return config if fields is None else with_selection(config, fields)


# kubeconfigs with embedded certificates for many clusters reach a few hundred KB.
MAX_KUBECONFIG_BYTES = 4 << 20


def _check_kubeconfig(path: str) -> None:
    """The kubernetes library reads and parses the whole file with no limit, so a FIFO would block
    its thread for good and /dev/zero fill memory: refuse both here, with one line."""
    from pathlib import Path

    from kube_gpu_exporter.exporter import small_yaml

    try:
        small_yaml.load(small_yaml.read_text(Path(path), MAX_KUBECONFIG_BYTES))
    except small_yaml.YamlRefused as exc:
        raise UsageError(f"argument --kubernetes.kubeconfig: {quoted_path(path)}: {exc}") from None
