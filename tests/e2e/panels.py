"""Every query of every panel of the provisioned dashboards, as Grafana would send it to a
Prometheus-compatible API, with template variables resolved through their own queries."""

from __future__ import annotations

import json
import time
from pathlib import Path

from bundle.localstack.configs import FAST
from bundle.localstack.prometheus_api import PrometheusAPI
from dashboards.grafana_queries import macros, panel_queries, resolve_variables, seconds, substitute

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards" / "provisioned").glob("*.json"))
# Panels that can only have data where kube-state-metrics runs; test_panels proves the list
# exact (these and only these are empty without it), then fills them from synthetic series.
NEEDS_KUBE_STATE_METRICS = {
    ("GPU / Cluster Capacity", "GPUs requested by pending pods"),
    ("GPU / Cluster Capacity", "Pending GPU requests per namespace"),
}


def run_panels(
    api: PrometheusAPI, only: set[tuple[str, str]] | None = None
) -> dict[tuple[str, str], list]:
    """(dashboard, panel) -> the series each of its queries returned, empty lists kept."""
    results: dict[tuple[str, str], list] = {}
    now = time.time()
    for path in DASHBOARDS:
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
