"""Every query of every panel of the provisioned dashboards, as Grafana would send it to a
Prometheus-compatible API, with template variables resolved through their own queries."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.bundle.flavours import flavour_paths
from kube_gpu_exporter.bundle.localstack.configs import FAST
from kube_gpu_exporter.bundle.localstack.grafana_queries import (
    macros,
    panel_queries,
    resolve_variables,
    seconds,
    substitute,
)
from kube_gpu_exporter.bundle.localstack.prometheus_api import PrometheusAPI
from kube_gpu_exporter.bundle.render import ROOT


def dashboards_of(version: str) -> list[Path]:
    """The provisioned dashboards of the bundle flavour for a dcgm-exporter profile."""
    return sorted(ROOT / path for path in flavour_paths(version).provisioned)


# Panels that can only have data where kube-state-metrics runs, by dashboard file and panel
# title; test_panels proves the list exact (these and only these are empty without it), then
# fills them from synthetic series.
_KUBE_STATE_METRICS_PANELS = {
    "gpu-cluster-capacity": ("GPUs requested by pending pods", "Pending GPU requests per namespace")
}


def needs_kube_state_metrics(dashboards: Sequence[Path]) -> set[tuple[str, str]]:
    """(dashboard title, panel title) of those panels in `dashboards`."""
    return {
        (json.loads(path.read_text())["title"], panel)
        for path in dashboards
        for panel in _KUBE_STATE_METRICS_PANELS.get(path.stem, ())
    }


# Panels of the NVLink, fabric and C2C families, which only a node with an NVLink fabric serves
# (a collectors file turns them on): empty on the default simulated node, and each one with data
# on `--simulate gb200` (test_nvlink_fabric.py).
FABRIC_NODE_PANELS: dict[str, tuple[str, ...]] = {
    "gpu-devices": (
        "NVLink errors per link",
        "NVLink errors per counter",
        "NVLink traffic (Blackwell counters)",
        "Fabric registration",
        "Fabric health",
        "Fabric health conditions",
        "C2C link",
        "Recovery action",
    ),
    "gpu-cluster-capacity": ("GPUs by NVLink domain",),
}


def panels_in(
    table: dict[str, tuple[str, ...]], dashboards: Sequence[Path]
) -> set[tuple[str, str]]:
    """(dashboard title, panel title) of `table`'s panels, keyed there by dashboard file stem."""
    return {
        (json.loads(path.read_text())["title"], panel)
        for path in dashboards
        for panel in table.get(path.stem, ())
    }


def needs_fabric_node(dashboards: Sequence[Path]) -> set[tuple[str, str]]:
    """The panels only a node on an NVLink fabric fills."""
    return panels_in(FABRIC_NODE_PANELS, dashboards)


# Panels of GPUs whose health verdict asks for a repair while pods hold them: empty on a healthy
# node, and with data once a fault is injected (test_gpu_health.py). On the session's stack
# they may hold an earlier test's XID, so test_panels accepts them either way.
FAULTY_NODE_PANELS: dict[str, tuple[str, ...]] = {
    "gpu-cluster-capacity": ("Unhealthy GPUs still held by pods",)
}


def needs_faulty_node(dashboards: Sequence[Path]) -> set[tuple[str, str]]:
    """The panels only a GPU needing a repair fills."""
    return panels_in(FAULTY_NODE_PANELS, dashboards)


DASHBOARDS = dashboards_of(DEFAULT.dcgm_version)
NEEDS_KUBE_STATE_METRICS = needs_kube_state_metrics(DASHBOARDS)
NEEDS_FABRIC_NODE = needs_fabric_node(DASHBOARDS)


def run_panels(
    api: PrometheusAPI,
    only: set[tuple[str, str]] | None = None,
    dashboards: Sequence[Path] = DASHBOARDS,
) -> dict[tuple[str, str], list]:
    """(dashboard, panel) -> the series each of its queries returned, empty lists kept."""
    results: dict[tuple[str, str], list] = {}
    now = time.time()
    for path in dashboards:
        dashboard = json.loads(path.read_text())
        variables = resolve_variables(dashboard, api)
        grafana_macros = macros(dashboard, seconds(FAST.scrape_interval))
        for query in panel_queries(dashboard):
            key = (query.dashboard, query.panel)
            if only is not None and key not in only:
                continue
            expr = substitute(query.expr, variables, grafana_macros)
            if query.instant:
                series = api.query(expr, now)
            else:
                series = api.query_range(expr, now - 120, now, 15)
            results.setdefault(key, []).append(series)
    return results
