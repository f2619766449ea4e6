"""Faults injected into the running simulator reach the Alertmanager webhook as the matching
alert, with the node, GPU and pod named, and resolve once the fault clears.

Timing comes from the test-only overrides in conftest: 1 s scrapes and evaluations, `for: 5s`,
15 s look-back windows, Alertmanager grouping within 1 s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kube_gpu_exporter.bundle.localstack.webhook import Alert
from tests.e2e.conftest import at_evaluation_interval, wait_for_rule_evaluations, wait_until

FIRE_TIMEOUT = 60.0
RESOLVE_TIMEOUT = 60.0


def _matches(alert: Alert, status: str, name: str, labels: dict[str, str]) -> bool:
    got = alert.get("labels", {})
    return (
        alert.get("status") == status
        and got.get("alertname") == name
        and all(got.get(k) == v for k, v in labels.items())
    )


def fire_and_resolve(
    stack,
    name: str,
    labels: dict[str, str],
    inject: Callable[[], Any],
    clear: Callable[[], Any],
) -> Alert:
    """Inject, wait for the firing notification, clear, wait for the resolved one."""
    mark = len(stack.webhook.alerts())
    inject()
    firing = stack.webhook.wait_for(
        lambda a: _matches(a, "firing", name, labels), FIRE_TIMEOUT, after=mark
    )
    active = [a["metric"] for a in stack.api.query("ALERTS")]
    assert firing, f"{name} {labels} never reached the webhook; ALERTS now: {active}"
    clear()
    resolved = stack.webhook.wait_for(
        lambda a: _matches(a, "resolved", name, labels), RESOLVE_TIMEOUT, after=mark
    )
    assert resolved, f"{name} {labels} fired but never resolved"
    return firing


@pytest.fixture(scope="module")
def node(stack) -> dict[str, Any]:
    """The simulated GPUs; a whole GPU held by exactly one pod is the usual victim."""
    gpus = stack.gpus()
    victim = next(
        g for g in gpus if not g["mig_enabled"] and len(g["pods"]) == 1 and g["workload"] != "idle"
    )
    return {
        "gpus": gpus,
        "victim": victim,
        "name": stack.node_name,
        "host_label": stack.config.host_label,
    }


def gpu_labels(node: dict[str, Any], gpu: dict[str, Any]) -> dict[str, str]:
    return {node["host_label"]: node["name"], "gpu": str(gpu["index"]), "UUID": gpu["uuid"]}


def names_pod(alert: Alert, gpu: dict[str, Any]) -> bool:
    description = alert["annotations"]["description"]
    return all(pod in description for pod in gpu["pods"])


def test_a_healthy_node_raises_no_alert(stack):
    wait_until(
        lambda: stack.api.query('count_over_time(up{job="kube-gpu-exporter"}[1m]) > 15'),
        60,
        "15 s of scrapes",
    )
    # Alerts come from rule evaluations, which run on their own schedule: one over that data.
    wait_for_rule_evaluations(stack.api, at_evaluation_interval)
    # Pending ones count too: nothing on a healthy node may even start toward an alert.
    seen = [a["metric"] for a in stack.api.query("last_over_time(ALERTS[15s])")]
    assert seen == []


def test_xid_79_fires_gpu_xid_critical(stack, node):
    gpu = node["victim"]
    alert = fire_and_resolve(
        stack,
        "GPUXidCritical",
        {**gpu_labels(node, gpu), "xid": "79", "severity": "critical"},
        lambda: stack.inject(gpu["index"], "xid", xid=79),
        lambda: None,  # an XID is an event: the alert ends when the window passes without one
    )
    assert names_pod(alert, gpu), alert["annotations"]["description"]
    assert "79" in alert["annotations"]["description"]


def test_overheating_fires_temperature_high(stack, node):
    gpu = node["victim"]
    alert = fire_and_resolve(
        stack,
        "GPUTemperatureHigh",
        {**gpu_labels(node, gpu), "severity": "critical"},
        lambda: stack.inject(gpu["index"], "temperature", offset_celsius=45),
        lambda: stack.inject(gpu["index"], "temperature", offset_celsius=0),
    )
    assert names_pod(alert, gpu), alert["annotations"]["description"]


def test_uncorrectable_ecc_error_fires_until_the_gpu_is_reset(stack, node):
    gpu = node["victim"]
    alert = fire_and_resolve(
        stack,
        "GPUEccUncorrectableErrors",
        {**gpu_labels(node, gpu), "severity": "critical"},
        lambda: stack.inject(gpu["index"], "ecc", double_bit=True, count=1),
        lambda: stack.inject(gpu["index"], "reset"),
    )
    assert names_pod(alert, gpu), alert["annotations"]["description"]
    # The same error left a row remap pending on an H100; the reset applied it.
    for status in ("firing", "resolved"):
        remap = stack.webhook.wait_for(
            lambda a, s=status: _matches(a, s, "GPURowRemapPending", gpu_labels(node, gpu)),
            RESOLVE_TIMEOUT,
        )
        assert remap, f"GPURowRemapPending never {status}"


def test_lost_gpu_fires_gpu_lost(stack, node):
    gpu = node["victim"]
    alert = fire_and_resolve(
        stack,
        "GPULost",
        {**gpu_labels(node, gpu), "severity": "critical"},
        lambda: stack.inject(gpu["index"], "lose"),
        lambda: stack.inject(gpu["index"], "restore"),
    )
    assert names_pod(alert, gpu), alert["annotations"]["description"]


def test_allocated_but_idle_gpu_fires_info_alert(stack, node):
    gpu = node["victim"]
    [pod] = gpu["pods"]
    namespace, pod_name = pod.split("/")
    fire_and_resolve(
        stack,
        "GPUAllocatedIdle",
        {**gpu_labels(node, gpu), "namespace": namespace, "pod": pod_name, "severity": "info"},
        lambda: stack.inject(gpu["index"], "workload", workload="idle"),
        lambda: stack.inject(gpu["index"], "workload", workload=gpu["workload"]),
    )


def test_stopped_exporter_fires_target_down(stack, node):
    fire_and_resolve(
        stack,
        "GPUExporterTargetDown",
        {"instance": stack.addresses["exporter"], "node": node["name"], "severity": "warning"},
        stack.exporter.stop,
        stack.exporter.start,
    )


def test_idle_mig_instance_fires_through_gpm_engine_activity(stack, node):
    # NVML has no utilization on MIG; GPM's engine activity (Hopper) is what shows it idle.
    gpu = next(g for g in node["gpus"] if g["mig_enabled"] and g["pods"])
    namespace, pod_name = gpu["pods"][0].split("/")
    alert = fire_and_resolve(
        stack,
        "GPUAllocatedIdle",
        {**gpu_labels(node, gpu), "namespace": namespace, "pod": pod_name, "severity": "info"},
        lambda: stack.inject(gpu["index"], "workload", workload="idle"),
        lambda: stack.inject(gpu["index"], "workload", workload=gpu["workload"]),
    )
    assert alert["labels"]["GPU_I_ID"].isdigit()
