"""The bundle on a global view (see global_view.py): two clusters remote-write to one
VictoriaMetrics, vmalert evaluates the bundle's rules there. Every recorded series keeps its
cluster, same-named nodes of two clusters stay apart, an alert names the cluster it fired in, and
every dashboard panel answers from the global view as it does from Prometheus."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from kube_gpu_exporter.bundle.alerts import recording as r
from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.bundle.localstack.configs import FAST, quick_alerts
from kube_gpu_exporter.bundle.localstack.grafana_queries import seconds
from tests.e2e.conftest import wait_until
from tests.e2e.global_view import GlobalView
from tests.e2e.panels import NEEDS_FABRIC_NODE, NEEDS_KUBE_STATE_METRICS, run_panels

CLUSTERS = ("east", "west")
# A benign XID (13: graphics engine exception) so the XID panels have an event to show.
WARM_UP_XID = 13
# Remote write adds about 8 s between a scrape and the sample being queryable here (5-10 s seen);
# the alerts' look-back windows must outlast that plus `for`, or an XID's window closes before it
# fires. The per-device history keeps the short window: its first evaluation is waited for.
CONFIG = replace(
    quick_alerts(DEFAULT, window="60s"),
    dashboards=replace(DEFAULT.dashboards, device_history_window="15s"),
)
# Starting seven processes and waiting for a history window takes more than the default limit.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def view(tmp_path_factory) -> Iterator[GlobalView]:
    with GlobalView(
        tmp_path_factory.mktemp("global-view"),
        CONFIG,
        FAST,
        CLUSTERS,
    ) as started:
        # An XID sent before the watcher registers its event set is lost, as on a real GPU.
        wait_until(
            lambda: started.api.query(
                'kube_gpu_exporter_collector_success{cluster="east", collector="xid"} == 1'
            ),
            60,
            "east's XID watcher, seen through the global view",
        )
        started.clusters[0].simulator.inject(0, "xid", xid=WARM_UP_XID)
        window = seconds(started.config.dashboards.device_history_window)
        wait_until(
            lambda: (
                len(started.api.query(f"count by (cluster) ({r.DEVICE_BUSY_AVG})")) == 2
                # The energy records add up rates a minute apart on the clock.
                and len(started.api.query(f"count by (cluster) ({r.NS_ENERGY})")) == 2
                and started.api.query(
                    f'DCGM_EXP_XID_ERRORS_TOTAL{{cluster="east", xid="{WARM_UP_XID}"}}'
                    ' and on () count_over_time(up{cluster="west"}[1m]) > 12'
                )
            ),
            max(3 * window, 60) + 30,
            "both clusters' history windows and energy minutes, the warm-up XID and a dozen "
            "scrapes",
        )
        yield started


def _by_cluster(series: list[dict]) -> dict[str, float]:
    return {s["metric"].get("cluster", ""): float(s["value"][1]) for s in series}


def test_recorded_series_keep_their_cluster_and_same_named_nodes_stay_apart(view):
    gpus = len(view.clusters[0].simulator.gpus())
    per_node = wait_until(
        lambda: found if len(found := view.api.query(r.PHYSICAL)) >= len(CLUSTERS) else None,
        30,
        "both clusters' per-node GPU counts",
    )
    assert {(s["metric"]["cluster"], s["metric"]["node"]) for s in per_node} == {
        (c, view.node_name) for c in CLUSTERS
    }
    assert {float(s["value"][1]) for s in per_node} == {gpus}
    # Summed per cluster, not across the two same-named nodes.
    # vmalert evaluates each cluster's rules on its own schedule: wait until both have a total,
    # not until the first one does.
    totals = wait_until(
        lambda: (
            found
            if set(found := _by_cluster(view.api.query(r.cluster_total(r.PHYSICAL))))
            == set(CLUSTERS)
            else None
        ),
        30,
        "both clusters' totals, which read the node rules",
    )
    assert totals == {c: gpus for c in CLUSTERS}

    # vmalert's recorded namespace counts match the raw allocations of each cluster, once the
    # recording has caught up with what was scraped.
    def allocated_and_raw() -> tuple[dict[str, float], dict[str, float]]:
        allocated = _by_cluster(view.api.query(f"sum by (cluster) ({r.NS_ALLOCATED})"))
        raw = _by_cluster(
            view.api.query(
                f"count by (cluster) (max by (cluster, {CONFIG.host_label}, UUID, GPU_I_ID, "
                "namespace, resource) (kube_gpu_exporter_pod_device_allocation))"
            )
        )
        return allocated, raw

    allocated, raw = wait_until(
        lambda: (
            pair
            if (pair := allocated_and_raw())[0] == pair[1] and set(pair[0]) == set(CLUSTERS)
            else None
        ),
        30,
        "recorded namespace allocations of both clusters equal to the raw ones",
    )
    assert allocated == raw and allocated["east"] > 0
    recorded = view.api.query('count by (__name__) ({__name__=~".+:.+"})')
    assert len(recorded) >= 15, [s["metric"] for s in recorded]
    assert view.api.query('{__name__=~".+:.+", cluster=""}') == []


def test_an_alert_names_the_cluster_it_fired_in(view):
    east, west = view.clusters
    victim = next(g for g in east.simulator.gpus() if not g["mig_enabled"])
    mark = len(view.webhook.alerts())
    east.simulator.inject(victim["index"], "xid", xid=79)
    firing = view.webhook.wait_for(
        lambda a: a["labels"].get("alertname") == "GPUXidCritical" and a["status"] == "firing",
        60,
        after=mark,
    )
    received = [(a["labels"].get("alertname"), a["status"]) for a in view.webhook.alerts()]
    assert firing, f"GPUXidCritical never reached Alertmanager from vmalert; received {received}"
    labels = firing["labels"]
    assert (labels["cluster"], labels[CONFIG.host_label], labels["UUID"], labels["xid"]) == (
        "east",
        view.node_name,
        victim["uuid"],
        "79",
    )
    assert all(
        a["labels"].get("cluster") == "east"
        for a in view.webhook.alerts()[mark:]
        if a["labels"].get("alertname") == "GPUXidCritical"
    )
    assert west.simulator.gpus()  # the other cluster's node kept running throughout


def test_every_panel_answers_from_the_global_view(view):
    results = run_panels(view.api)
    assert len(results) > 40
    empty = {key for key, per_query in results.items() if not all(per_query)}
    assert empty == NEEDS_KUBE_STATE_METRICS | NEEDS_FABRIC_NODE
    # The cluster variable picks one cluster (its first value); panels count only its GPUs.
    [[physical]] = results[("GPU / Cluster Capacity", "Physical GPUs")]
    assert float(physical["values"][-1][1]) == len(view.clusters[0].simulator.gpus())
