"""The alerts and panels on the exporter's GPU health verdict, on the default simulated node in
a real Prometheus and Alertmanager: a healthy node raises none of GPUNeedsReset, GPUNeedsReboot
and GPUNeedsDrain, and each fault injected through the simulator's control API reaches the
webhook as the alert of the action its reason asks for, naming the reason and the pod.

A stack of its own: an XID holds the verdict for minutes after its last event and a failed row
remap until the board says otherwise, so these faults cannot be cleared for the session's other
tests. Timing comes from the test-only overrides in conftest (1 s scrapes and evaluations,
`for: 5s`). Each fault goes to a different GPU held by one pod, since a GPU raises only the
alert of its strongest action.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kube_gpu_exporter.bundle.alerts import gpu_health
from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.bundle.localstack.stack import LocalStack
from tests.e2e.conftest import (
    at_evaluation_interval,
    started_stack,
    wait_for_rule_evaluations,
    wait_until,
)
from tests.e2e.ksm_fake import FakeKubeStateMetrics
from tests.e2e.panels import dashboards_of, needs_faulty_node, run_panels
from tests.e2e.test_alerts import FIRE_TIMEOUT, names_pod

ACTION_ALERTS = tuple(spec.name for spec in gpu_health.ACTION_ALERTS)
DASHBOARDS = dashboards_of(DEFAULT.dcgm_version)


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[LocalStack]:
    ksm = FakeKubeStateMetrics("127.0.0.1")
    try:
        with started_stack(tmp_path_factory.mktemp("gpu-health"), DEFAULT, ksm) as stack:
            stack.wait_for_xid_watch()
            yield stack
    finally:
        ksm.stop()


@pytest.fixture(scope="module")
def victims(node: LocalStack) -> Iterator[dict[str, Any]]:
    """Whole GPUs held by exactly one pod, handed out one per test."""
    return iter(
        g
        for g in node.gpus()
        if not g["mig_enabled"] and len(g["pods"]) == 1 and g["workload"] != "idle"
    )


def labels(node: LocalStack, gpu: dict[str, Any], severity: str) -> dict[str, str]:
    return {
        node.config.host_label: node.node_name,
        "gpu": str(gpu["index"]),
        "UUID": gpu["uuid"],
        "severity": severity,
    }


def fires(node: LocalStack, name: str, want: dict[str, str], inject: Callable[[], Any]) -> Any:
    """Inject, and wait for `name`'s firing notification with `want` among its labels."""
    mark = len(node.webhook.alerts())
    inject()

    def matches(alert: Any) -> bool:
        got = alert.get("labels", {})
        return (
            alert.get("status") == "firing"
            and got.get("alertname") == name
            and all(got.get(k) == v for k, v in want.items())
        )

    firing = node.webhook.wait_for(matches, FIRE_TIMEOUT, after=mark)
    active = [a["metric"] for a in node.api.query("ALERTS")]
    assert firing, f"{name} {want} never reached the webhook; ALERTS now: {active}"
    return firing


def test_a_healthy_node_raises_no_action_alert(node):
    wait_until(
        lambda: node.api.query('count_over_time(up{job="kube-gpu-exporter"}[1m]) > 15'),
        60,
        "15 s of scrapes",
    )
    assert node.api.query(f'{gpu_health.HEALTH_REASON}{{reason="healthy"}}'), "no verdict"
    wait_for_rule_evaluations(node.api, at_evaluation_interval)
    names = "|".join(ACTION_ALERTS)
    assert node.api.query(f'last_over_time(ALERTS{{alertname=~"{names}"}}[15s])') == []


def test_xid_79_asks_for_a_drain(node, victims):
    # XID 79, fallen off the bus: drain the node first (docs/health.md).
    gpu = next(victims)
    alert = fires(
        node,
        "GPUNeedsDrain",
        labels(node, gpu, "critical"),
        lambda: node.inject(gpu["index"], "xid", xid=79),
    )
    description = alert["annotations"]["description"]
    assert "xid_79 (drain)" in description, description
    assert names_pod(alert, gpu), description


def test_a_failed_row_remap_asks_for_a_drain(node, victims):
    gpu = next(victims)
    alert = fires(
        node,
        "GPUNeedsDrain",
        labels(node, gpu, "critical"),
        lambda: node.inject(gpu["index"], "row-remap", pending=False, failure=True),
    )
    description = alert["annotations"]["description"]
    assert "row_remap_failure (drain)" in description, description
    assert names_pod(alert, gpu), description


def test_a_pending_row_remap_asks_for_a_reset(node, victims):
    gpu = next(victims)
    alert = fires(
        node,
        "GPUNeedsReset",
        labels(node, gpu, "warning"),
        lambda: node.inject(gpu["index"], "row-remap", pending=True),
    )
    description = alert["annotations"]["description"]
    assert "row_remap_pending (reset)" in description, description
    assert names_pod(alert, gpu), description


def test_the_unhealthy_gpu_panels_have_data(node):
    # After the faults above: GPUs pods hold that need a repair.
    wanted = needs_faulty_node(DASHBOARDS)
    results = run_panels(node.api, wanted, DASHBOARDS)
    assert set(results) == wanted
    empty = sorted(key for key, per_query in results.items() if not all(per_query))
    assert empty == []
