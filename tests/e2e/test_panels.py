"""Every query of every panel of the generated dashboards returns data from a real Prometheus
scraping the simulated node, with template variables resolved through their own queries."""

from __future__ import annotations

import json

import pytest

from alerts import recording as r
from dashboards.grafana_queries import resolve_variables, seconds
from tests.e2e.conftest import wait_for_rule_evaluations, wait_until
from tests.e2e.ksm_fake import PENDING_POD, ksm_exposition
from tests.e2e.panels import DASHBOARDS, NEEDS_KUBE_STATE_METRICS, run_panels

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
    # The per-device history group runs once per (shortened) window, at an offset of its own.
    window = seconds(stack.config.dashboards.device_history_window)
    wait_until(
        lambda: stack.api.query(r.DEVICE_BUSY_AVG), 3 * window, "a per-device history window"
    )
    # Twice every group that runs faster than the window, so rules reading other groups'
    # results (possibly evaluated just before those) have caught up too.
    for _ in range(2):
        wait_for_rule_evaluations(stack.api, lambda group: group["interval"] < window)
    return stack


def test_variables_resolve_to_real_values(warm):
    for path in DASHBOARDS:
        variables = resolve_variables(json.loads(path.read_text()), warm.api)
        assert warm.node_name in variables["node"]
        if "gpu" in variables:
            assert variables["gpu"].startswith("(0|1|"), variables["gpu"]


def test_every_panel_has_data_except_those_needing_kube_state_metrics(warm):
    results = run_panels(warm.api)
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
    results = run_panels(warm.api, NEEDS_KUBE_STATE_METRICS)
    assert set(results) == NEEDS_KUBE_STATE_METRICS
    for key, per_query in results.items():
        assert all(per_query), key
    namespace, _pod, _container, requested = PENDING_POD
    [[per_namespace]] = results[("GPU / Cluster Capacity", "Pending GPU requests per namespace")]
    assert per_namespace["metric"]["namespace"] == namespace
    assert float(per_namespace["value"][1]) == requested
    [[total]] = results[("GPU / Cluster Capacity", "GPUs requested by pending pods")]
    assert float(total["values"][-1][1]) == requested
