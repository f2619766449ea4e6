"""Every query of every panel of the generated dashboards returns data from a real Prometheus
scraping the simulated node, with template variables resolved through their own queries."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bundle.localstack.configs import FAST
from dashboards.grafana_queries import macros, panel_queries, resolve_variables, seconds, substitute
from tests.e2e.conftest import wait_until
from tests.e2e.ksm_fake import PENDING_POD, ksm_exposition

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards" / "provisioned").glob("*.json"))
# Panels that can only have data where kube-state-metrics runs; the first test proves the list
# exact (these and only these are empty without it), the second fills them from synthetic series.
NEEDS_KUBE_STATE_METRICS = {
    ("GPU / Cluster Capacity", "GPUs requested by pending pods"),
    ("GPU / Cluster Capacity", "Pending GPU requests per namespace"),
}
# A benign XID (13: graphics engine exception) so the XID panels have an event to show.
WARM_UP_XID = 13


@pytest.fixture(scope="module")
def warm(stack):
    stack.inject(0, "xid", xid=WARM_UP_XID)
    # Enough samples for every rate window, and one evaluation of the rules after the XID.
    wait_until(
        lambda: stack.api.query(
            f'DCGM_EXP_XID_ERRORS_TOTAL{{xid="{WARM_UP_XID}"}} '
            'and on () count_over_time(up{job="kube-gpu-exporter"}[1m]) > 12 '
            "and on () count_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[1m]) > 4"
        ),
        60,
        "the XID and a dozen scrapes",
    )
    time.sleep(2 * seconds(FAST.evaluation_interval))
    return stack


def run_panels(stack, only: set[tuple[str, str]] | None = None) -> dict[tuple[str, str], list]:
    """(dashboard, panel) -> the series each of its queries returned, empty lists kept."""
    results: dict[tuple[str, str], list] = {}
    now = time.time()
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        variables = resolve_variables(dashboard, stack.api)
        grafana_macros = macros(dashboard, seconds(FAST.scrape_interval))
        for query in panel_queries(dashboard):
            key = (query.dashboard, query.panel)
            if only is not None and key not in only:
                continue
            expr = substitute(query.expr, variables, grafana_macros)
            if query.instant:
                series = stack.api.query(expr, now)
            else:
                series = stack.api.query_range(expr, now - 120, now, 15)
            results.setdefault(key, []).append(series)
    return results


def test_variables_resolve_to_real_values(warm):
    for path in DASHBOARDS:
        variables = resolve_variables(json.loads(path.read_text()), warm.api)
        assert warm.node_name in variables["node"]
        if "gpu" in variables:
            assert variables["gpu"].startswith("(0|1|"), variables["gpu"]


def test_every_panel_has_data_except_those_needing_kube_state_metrics(warm):
    results = run_panels(warm)
    assert len(results) > 40
    empty = {key for key, per_query in results.items() if not all(per_query)}
    assert empty == NEEDS_KUBE_STATE_METRICS


def test_kube_state_metrics_panels_have_data_from_synthetic_series(warm, ksm):
    ksm.serve(ksm_exposition(warm.node_name, warm.gpus()))
    wait_until(
        lambda: warm.api.query(
            "namespace_resource:kube_pod_container_resource_requests_gpu_pending:sum"
        ),
        30,
        "the pending-requests recording rule over the synthetic kube-state-metrics",
    )
    results = run_panels(warm, NEEDS_KUBE_STATE_METRICS)
    assert set(results) == NEEDS_KUBE_STATE_METRICS
    for key, per_query in results.items():
        assert all(per_query), key
    namespace, _pod, _container, requested = PENDING_POD
    [[per_namespace]] = results[("GPU / Cluster Capacity", "Pending GPU requests per namespace")]
    assert per_namespace["metric"]["namespace"] == namespace
    assert float(per_namespace["value"][1]) == requested
    [[total]] = results[("GPU / Cluster Capacity", "GPUs requested by pending pods")]
    assert float(total["values"][-1][1]) == requested
