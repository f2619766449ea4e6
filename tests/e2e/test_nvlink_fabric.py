"""The NVLink, fabric and recovery-action part of the bundle on a GB200 compute tray
(`--simulate gb200`, whose built-in collectors file turns those families on), in a real
Prometheus and Alertmanager: every panel of them has data, and each fault injected through the
simulator's control API reaches the webhook as its alert, naming the GPU and its pods, then
resolves once the fault clears.

Timing comes from the test-only overrides in conftest (1 s scrapes and evaluations, `for: 5s`,
15 s windows and start-up grace); the slow fields (the fabric, the recovery action, Blackwell's
counters) are read every second too. GPUC2CLinkInactive has no fault to inject (the simulator's
C2C links stay active); its promtool tests cover it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.bundle.localstack.stack import LocalStack
from kube_gpu_exporter.exporter.simulator.fleet import builtin_fleet
from tests.e2e.conftest import started_stack, wait_until
from tests.e2e.ksm_fake import FakeKubeStateMetrics
from tests.e2e.panels import dashboards_of, needs_fabric_node, run_panels
from tests.e2e.test_alerts import fire_and_resolve, names_pod

FLEET = "gb200"
NODE = builtin_fleet(FLEET).node_name
DASHBOARDS = dashboards_of(DEFAULT.dcgm_version)
# Enough scrapes for a rate over the dashboards' $__rate_interval (a minute and a scrape).
WARM_UP_SCRAPES = 70


@pytest.fixture(scope="module")
def tray(tmp_path_factory) -> Iterator[LocalStack]:
    ksm = FakeKubeStateMetrics("127.0.0.1")
    try:
        with started_stack(
            tmp_path_factory.mktemp("gb200"),
            DEFAULT,
            ksm,
            exporter_args=("--simulate", FLEET, "--collector.field-interval=slow-fields=1s"),
        ) as stack:
            yield stack
    finally:
        ksm.stop()


@pytest.fixture(scope="module")
def victim(tray: LocalStack) -> dict[str, Any]:
    """A GPU held by exactly one pod, on the fabric."""
    return next(
        g
        for g in tray.gpus()
        if len(g["pods"]) == 1 and g["workload"] != "idle" and g["fabric"] is not None
    )


def labels(tray: LocalStack, gpu: dict[str, Any], **extra: str) -> dict[str, str]:
    return {
        tray.config.host_label: NODE,
        "gpu": str(gpu["index"]),
        "UUID": gpu["uuid"],
        **extra,
    }


def test_the_fabric_panels_have_data(tray: LocalStack):
    wait_until(
        lambda: tray.api.query(
            f'count_over_time(up{{job="kube-gpu-exporter"}}[2m]) > {WARM_UP_SCRAPES}'
        ),
        120,
        f"{WARM_UP_SCRAPES} scrapes",
    )
    wanted = needs_fabric_node(DASHBOARDS)
    results = run_panels(tray.api, wanted, DASHBOARDS)
    assert set(results) == wanted
    empty = sorted(key for key, per_query in results.items() if not all(per_query))
    assert empty == []
    # Every GPU of the tray is in the fleet's one NVLink domain.
    info = 'kube_gpu_exporter_nvlink_domain_info{job="kube-gpu-exporter"}'
    [domain] = tray.api.query(f"count by (cluster_uuid, clique_id) ({info})")
    assert float(domain["value"][1]) == len(tray.gpus())


@pytest.mark.parametrize(
    ("kind", "counter"),
    [
        ("replay", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"),
        ("symbol", "DCGM_FI_DEV_NVLINK_COUNT_RX_SYMBOL_ERRORS"),
    ],
)
def test_an_nvlink_error_burst_fires_gpu_nvlink_errors(tray, victim, kind, counter):
    alert = fire_and_resolve(
        tray,
        "GPUNvlinkErrors",
        labels(tray, victim, counter=counter, severity="warning"),
        lambda: tray.inject(victim["index"], "nvlink-errors", kind=kind, link=3, count=1000),
        lambda: None,  # a burst is an event: the alert ends once the window has passed it
    )
    assert names_pod(alert, victim), alert["annotations"]["description"]


@pytest.mark.parametrize(
    ("alertname", "condition", "fault", "severity"),
    [
        ("GPUFabricDegraded", "degraded_bandwidth", {"degraded_bandwidth": True}, "warning"),
        ("GPUFabricDegraded", "route_recovery", {"route_recovery": True}, "warning"),
        ("GPUFabricUnhealthy", "route_unhealthy", {"route_unhealthy": True}, "critical"),
        (
            "GPUFabricUnhealthy",
            "incorrect_configuration",
            {"incorrect_configuration": True},
            "critical",
        ),
    ],
)
def test_a_fabric_fault_fires_its_alert(tray, victim, alertname, condition, fault, severity):
    alert = fire_and_resolve(
        tray,
        alertname,
        labels(tray, victim, condition=condition, severity=severity),
        lambda: tray.inject(victim["index"], "fabric", state="completed", **fault),
        lambda: tray.inject(victim["index"], "fabric", state="completed"),
    )
    assert names_pod(alert, victim), alert["annotations"]["description"]
    assert condition in alert["annotations"]["description"]


def test_a_registration_stuck_in_progress_fires_past_the_grace(tray, victim):
    fire_and_resolve(
        tray,
        "GPUFabricUnhealthy",
        labels(tray, victim, condition="registration_pending", severity="critical"),
        lambda: tray.inject(victim["index"], "fabric", state="in_progress"),
        lambda: tray.inject(victim["index"], "fabric", state="completed"),
    )


def test_a_requested_recovery_action_is_named_in_words(tray, victim):
    alert = fire_and_resolve(
        tray,
        "GPURecoveryActionRequired",
        labels(tray, victim, severity="critical"),
        lambda: tray.inject(victim["index"], "recovery-action", action="reset"),
        lambda: tray.inject(victim["index"], "recovery-action", action="none"),
    )
    description = alert["annotations"]["description"]
    assert "asks for a GPU reset" in description, description
    assert names_pod(alert, victim), description
