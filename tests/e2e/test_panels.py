"""Every query of every panel of the generated dashboards returns data from a real Prometheus
scraping the simulated node, with template variables resolved through their own queries: for
every flavour of the bundle, each against an exporter run with that flavour's dcgm-exporter
profile and that flavour's rules. The default flavour uses the session's stack; another gets a
stack of its own for the length of its tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kube_gpu_exporter.bundle.alerts import recording as r
from kube_gpu_exporter.bundle.dcgm_units import rename
from kube_gpu_exporter.bundle.flavours import FLAVOURS
from kube_gpu_exporter.bundle.localstack.grafana_queries import resolve_variables, seconds
from kube_gpu_exporter.bundle.localstack.stack import LocalStack
from kube_gpu_exporter.exporter.dcgm_compat import RENAMES_4_9
from tests.e2e.conftest import started_stack, wait_for_rule_evaluations, wait_until
from tests.e2e.ksm_fake import PENDING_POD, FakeKubeStateMetrics, ksm_exposition
from tests.e2e.panels import (
    dashboards_of,
    needs_fabric_node,
    needs_faulty_node,
    needs_kube_state_metrics,
    run_panels,
)

# A benign XID (13: graphics engine exception) so the XID panels have an event to show.
WARM_UP_XID = 13
# A minute on the clock, a rule evaluation and slack.
ENERGY_WAIT_S = 90


@dataclass(frozen=True)
class Flavour:
    version: str
    stack: LocalStack
    ksm: FakeKubeStateMetrics
    dashboards: list[Path]

    @property
    def needs_kube_state_metrics(self) -> set[tuple[str, str]]:
        return needs_kube_state_metrics(self.dashboards)


def warm_up(stack: LocalStack) -> None:
    """Until every panel can have data: a dozen scrapes, an XID, a per-device history window and
    the rules over all of it."""
    dcgm = stack.config.profile
    stack.inject(0, "xid", xid=WARM_UP_XID)
    # Enough samples for every rate window, and one evaluation of the rules after the XID.
    wait_until(
        lambda: stack.api.query(
            f'{dcgm.name("DCGM_EXP_XID_ERRORS_TOTAL")}{{xid="{WARM_UP_XID}"}} '
            'and on () count_over_time(up{job="kube-gpu-exporter"}[1m]) > 12 '
            f"and on () count_over_time({dcgm.name('DCGM_FI_PROF_GR_ENGINE_ACTIVE')}[1m]) > 4"
        ),
        60,
        "the XID and a dozen scrapes",
    )
    # The per-device history group runs once per (shortened) window, at an offset of its own.
    window = seconds(stack.config.dashboards.device_history_window)
    wait_until(
        lambda: stack.api.query(rename(dcgm, r.DEVICE_BUSY_AVG)),
        3 * window,
        "a per-device history window",
    )
    # The energy records add up rates a minute apart on the clock: they have a first value, and
    # the energy panels data, once a minute has begun since the first rate.
    wait_until(
        lambda: stack.api.query(r.NS_ENERGY), ENERGY_WAIT_S, "the first minute of energy records"
    )
    # Twice every group that runs faster than the window, so rules reading other groups'
    # results (possibly evaluated just before those) have caught up too.
    for _ in range(2):
        wait_for_rule_evaluations(stack.api, lambda group: group["interval"] < window)


@pytest.fixture(scope="module", params=sorted(FLAVOURS))
def warm(request, stack, ksm, tmp_path_factory) -> Iterator[Flavour]:
    version = request.param
    if stack.config.dcgm_version == version:
        warm_up(stack)
        yield Flavour(version, stack, ksm, dashboards_of(version))
        return
    own_ksm = FakeKubeStateMetrics("127.0.0.1")
    try:
        with started_stack(
            tmp_path_factory.mktemp(f"stack-{version}"), FLAVOURS[version], own_ksm
        ) as own:
            warm_up(own)
            yield Flavour(version, own, own_ksm, dashboards_of(version))
    finally:
        own_ksm.stop()


def test_the_exporter_serves_the_flavours_names_and_units(warm):
    api, dcgm = warm.stack.api, warm.stack.config.profile
    job = 'job="kube-gpu-exporter"'
    for classic in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL"):
        ours = dcgm.name(classic)
        other = RENAMES_4_9[classic].name if ours == classic else classic
        assert api.query(f'{ours}{{{job}, {dcgm.host_label}="{warm.stack.node_name}"}}'), ours
        assert api.query(f"{other}{{{job}}}") == [], other
    # Utilization: a percentage in the classic profiles (busy GPUs exceed 1), a ratio in 4.9.
    [busiest] = api.query(f"max({dcgm.name('DCGM_FI_DEV_GPU_UTIL')}{{{job}}})")
    assert (float(busiest["value"][1]) <= 1) == dcgm.base_units, busiest


def test_variables_resolve_to_real_values(warm):
    for path in warm.dashboards:
        variables = resolve_variables(json.loads(path.read_text()), warm.stack.api)
        assert warm.stack.node_name in variables["node"]
        if "gpu" in variables:
            assert variables["gpu"].startswith("(0|1|"), variables["gpu"]


def test_every_panel_has_data_except_those_needing_kube_state_metrics(warm):
    results = run_panels(warm.stack.api, dashboards=warm.dashboards)
    assert len(results) > 40
    empty = {key for key, per_query in results.items() if not all(per_query)}
    # The NVLink fabric's panels have data on a fabric node only (test_nvlink_fabric.py); those
    # of GPUs needing a repair only after a fault, which an earlier test may have left here
    # (test_gpu_health.py fills them).
    empty -= needs_faulty_node(warm.dashboards)
    assert empty == warm.needs_kube_state_metrics | needs_fabric_node(warm.dashboards)


def test_kube_state_metrics_panels_have_data_from_synthetic_series(warm):
    stack, needed = warm.stack, warm.needs_kube_state_metrics
    warm.ksm.serve(ksm_exposition(stack.node_name, stack.gpus()))
    wait_until(
        lambda: stack.api.query(
            "namespace_resource:kube_pod_container_resource_requests_gpu_pending:sum"
        ),
        30,
        "the pending-requests recording rule over the synthetic kube-state-metrics",
    )
    results = run_panels(stack.api, needed, warm.dashboards)
    assert set(results) == needed
    for key, per_query in results.items():
        assert all(per_query), key
    by_panel = {panel: per_query for (_, panel), per_query in results.items()}
    namespace, _pod, _container, requested = PENDING_POD
    [[per_namespace]] = by_panel["Pending GPU requests per namespace"]
    assert per_namespace["metric"]["namespace"] == namespace
    assert float(per_namespace["value"][1]) == requested
    [[total]] = by_panel["GPUs requested by pending pods"]
    assert float(total["values"][-1][1]) == requested
