"""The 1,000-node benchmark's machinery, on a five-node cluster: the synthetic history, promtool's
backfill of it and of the recording rules, a real Prometheus, and the rule inlining that the
"without recording rules" figures rest on. Every capacity query must mean the same inlined."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pytest

from benchmarks.cluster.backfill import recording_rules, rule_levels
from benchmarks.cluster.cardinality import DCGM_DEFAULT_COUNTERS, node_cardinality
from benchmarks.cluster.dashboard_queries import grafana_queries, inliner
from benchmarks.cluster.synthetic import NodeGroup, Scale
from benchmarks.prometheus_side import backfilled
from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.bundle.localstack.prometheus_api import PrometheusAPI
from tests.e2e.panels import FABRIC_NODE_PANELS, FAULTY_NODE_PANELS


def _titles(table: dict[str, tuple[str, ...]]) -> list[str]:
    return [panel for panels in table.values() for panel in panels]


SMALL = Scale(
    cluster=(
        NodeGroup("cluster-h100", 2),
        NodeGroup("default", 1),
        NodeGroup("cluster-a100", 1),
        NodeGroup("mig-56", 1),
    ),
    window_seconds=1800,
    spread_steps=8,
    nodes_per_chunk=2,
)
# No XID happens in the synthetic history, no node of it is on an NVLink fabric, and no GPU
# needs a repair, so these panels have nothing to show.
EMPTY_PANELS = {
    "XID events",
    *(panel for table in (FABRIC_NODE_PANELS, FAULTY_NODE_PANELS) for panel in _titles(table)),
}
# A PromQL subquery: a range with a resolution, `[1h:1m]`.
SUBQUERY = re.compile(r"\[[^\]]*:[^\]]*\]")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with backfilled(SMALL, tmp_path_factory.mktemp("cluster"), lambda _: None, compact=False) as c:
        yield c


def _by_labels(series: list[dict]) -> dict[tuple, float]:
    """Label set (without the metric name, which only a plain selector keeps) -> value."""
    return {
        tuple(sorted((k, v) for k, v in s["metric"].items() if k != "__name__")): float(
            s["value"][1]
        )
        for s in series
    }


def _evaluated_at(api: PrometheusAPI, record: str, cluster) -> float:
    """The last instant `record`'s rule group was evaluated, 25 minutes in: groups run at an
    offset of their own."""
    [stamp] = api.query(f"max(timestamp({record}))", cluster.start + 1500)
    return float(stamp["value"][1])


def _assert_same(
    recorded: dict[tuple, float], raw: dict[tuple, float], what: str, rel_tol: float = 1e-9
) -> None:
    assert recorded.keys() == raw.keys(), what
    for labels, value in recorded.items():
        assert math.isclose(value, raw[labels], rel_tol=rel_tol, abs_tol=1e-9), (
            what,
            labels,
            value,
            raw[labels],
        )


def test_history_holds_every_node_and_its_own_names(cluster):
    api = PrometheusAPI(cluster.prometheus.url, timeout=60)
    at = cluster.end - 60
    nodes = api.query('count by (node) (up{job="kube-gpu-exporter"})', at)
    assert len(nodes) == 5
    uuids = api.query(
        'count by (UUID) (kube_gpu_exporter_device_info{job="kube-gpu-exporter"})', at
    )
    assert len(uuids) == 5 * 8  # every GPU of every node has a UUID of its own
    pods = api.query("count by (pod) (kube_gpu_exporter_pod_device_allocation)", at)
    assert len({p["metric"]["pod"] for p in pods}) == len(pods) > 5
    host = DEFAULT.host_label
    hosts = api.query(f"count by ({host}, node) (DCGM_FI_DEV_GPU_TEMP)", at)
    assert len(hosts) == 5
    assert all(h["metric"][host] == h["metric"]["node"] for h in hosts)
    exporter_series = sum(
        len(cluster.types[g.fleet].history.series) * g.count for g in SMALL.cluster
    )
    # Beside the exporter's: 5 scrape series and a cordon flag per node, pods' ksm series.
    assert cluster.stats.series > exporter_series + 6 * 5
    assert cluster.stats.samples >= 0.99 * cluster.stats.series * SMALL.steps


def test_recording_rules_were_backfilled_level_by_level(cluster):
    levels = rule_levels(recording_rules())
    assert len(levels) == cluster.stats.rule_levels == 3
    level_of = {r.record: i for i, rules in enumerate(levels) for r in rules}
    assert level_of["node_resource:kube_gpu_exporter_node_allocated_devices:max"] == 0
    assert level_of["node_resource:kube_gpu_exporter_node_free_devices:max"] == 1
    assert level_of["cluster:kube_gpu_exporter_schedulable_pods:sum"] == 2
    api = PrometheusAPI(cluster.prometheus.url, timeout=60)
    for record in level_of:
        assert api.query(record, cluster.end - 60), record


def test_every_capacity_query_means_the_same_inlined(cluster):
    """The rules' results and their inlined expressions agree at a rule evaluation instant."""
    api = PrometheusAPI(cluster.prometheus.url, timeout=120)
    inline = inliner()
    # A subquery's steps fall on the clock, a group's evaluations at an offset of their own; at a
    # 5 m interval the two read different windows (compared with the raw samples below instead).
    windowed = {r.record for r in recording_rules() if r.interval}
    # A record that sums another over a subquery (the hourly energy) reads that record's stored
    # points, taken at its group's evaluations; inlined, the subquery reads clock-aligned steps
    # of the expression instead, and a varying series differs between the two instants.
    windowed |= {r.record for r in recording_rules() if SUBQUERY.search(r.expr)}
    compared = 0
    for query in grafana_queries(api, cluster.start, cluster.end):
        if not inline.uses_rules(query.expr) or windowed & set(inline.recorded_names(query.expr)):
            continue
        if "_over_time(" in query.expr:
            # Over a range, a rule's stored points and the inlined subquery's clock-aligned steps
            # sample a varying series at different instants (usage-weighted chargeback); only a
            # constant one would agree.
            continue
        at = _evaluated_at(api, inline.recorded_names(query.expr)[0], cluster)
        recorded = _by_labels(api.query(query.expr, at))
        raw = _by_labels(api.query(inline.inline(query.expr), at))
        _assert_same(recorded, raw, f"{query.panel}: {query.expr}")
        compared += bool(recorded)
    assert compared >= 25


def test_device_history_windows_agree_with_the_raw_samples(cluster):
    """Evaluated once per 5 m window, the windows tile time: over three whole windows the mean of
    the window averages, and the max of the window peaks, are the raw samples' mean and max (each
    window holds the same number of scrapes)."""
    api = PrometheusAPI(cluster.prometheus.url, timeout=120)
    windowed = [r for r in recording_rules() if r.interval]
    assert {r.interval for r in windowed} == {"5m"} and len(windowed) == 2
    for rule in windowed:
        fn = "avg_over_time" if rule.record.endswith("avg_over_window") else "max_over_time"
        at = _evaluated_at(api, rule.record, cluster)
        # Stored once per window: 5 or 6 points in the 25 minutes, not 50 at the 30 s default.
        stored = {
            float(s["value"][1]) for s in api.query(f"count_over_time({rule.record}[25m])", at)
        }
        assert stored and stored <= {5.0, 6.0}, stored
        # 899 s: Prometheus 2 ranges include their left end, which would be the evaluation
        # before the three windows.
        recorded = _by_labels(api.query(f"{fn}({rule.record}[899s])", at))
        over_three = rule.expr.replace("[5m]", "[899s]")
        raw = _by_labels(api.query(over_three, at))
        assert len(recorded) > 20
        # A window's range includes its left end, so where a node's samples fall exactly on the
        # evaluation instants (the backfill starts on a block boundary of the wall clock), one
        # sample sits in two windows, and the first window's holds the sample at the left end
        # of the three, which the 899 s range leaves out.
        if fn == "max_over_time":
            # So the windows' peak lies between the peak over 899 s and over 900 s (that sample
            # in); a window that missed its samples would lie outside.
            with_edge = _by_labels(api.query(over_three.replace("[899s]", "[900s]"), at))
            assert recorded.keys() == raw.keys() == with_edge.keys(), rule.record
            for labels, value in recorded.items():
                assert raw[labels] - 1e-9 <= value <= with_edge[labels] + 1e-9, (
                    rule.record,
                    labels,
                    value,
                    raw[labels],
                    with_edge[labels],
                )
            continue
        # That moves a window's mean of 20 samples (5 m at 15 s) by at most the samples' spread
        # over 20; a window that missed its samples would be off by far more.
        spread = [
            _by_labels(api.query(over_three.replace("avg_over_time", bound), at))
            for bound in ("max_over_time", "min_over_time")
        ]
        assert recorded.keys() == raw.keys() == spread[0].keys()
        for labels, value in recorded.items():
            slack = max(5e-3 * abs(raw[labels]), (spread[0][labels] - spread[1][labels]) / 20)
            expected = raw[labels]
            assert abs(value - expected) <= slack + 1e-9, (rule.record, labels, value, expected)


def test_every_dashboard_query_has_data(cluster):
    api = PrometheusAPI(cluster.prometheus.url, timeout=120)
    empty = {
        q.panel
        for q in grafana_queries(api, cluster.start, cluster.end)
        if not (
            api.query(q.expr, cluster.end - 60)
            if q.instant
            else api.query_range(q.expr, cluster.start, cluster.end, 60)
        )
    }
    assert empty == EMPTY_PANELS


def test_cardinality_against_dcgm_exporter_defaults(cluster):
    default = node_cardinality(cluster.types["default"].history.series)
    assert default.total == default.dcgm_default + default.exporter_own + default.dcgm_extra
    # 6 whole GPUs and 7 MIG instances; whole GPUs have every default field of an H100.
    per_whole_gpu = len(DCGM_DEFAULT_COUNTERS)
    assert 6 * (per_whole_gpu - 2) < default.dcgm_default < 13 * per_whole_gpu
    mig = node_cardinality(cluster.types["mig-56"].history.series)
    assert mig.dcgm_default > 3 * default.dcgm_default


@dataclass
class _Rule:
    record: str
    expr: str
    labels: dict[str, str] = field(default_factory=dict)
    interval: str | None = None


RULES = [
    _Rule("a:x:sum", 'sum by (node) (x{job="kube-gpu-exporter"})'),
    _Rule("b:x:sum", "sum(a:x:sum) / 1", {"size": "1"}),
    _Rule("b:x:sum", "sum(a:x:sum) / 2", {"size": "2"}),
    _Rule("c:x:avg_over_window", 'avg_over_time(x{job="kube-gpu-exporter"}[5m])', {}, "5m"),
]


def test_live_prometheus_scrapes_every_node_of_the_cluster(cluster, tmp_path):
    from benchmarks.cluster import live_ingest

    result = live_ingest.measure(SMALL, cluster.types, tmp_path, seconds=24)
    exporter_series = sum(
        len(cluster.types[g.fleet].history.series) * g.count for g in SMALL.cluster
    )
    # Prometheus adds five series of its own per target (up, scrape_duration_seconds, ...).
    assert result.head_series == exporter_series + 5 * len(SMALL.nodes)
    assert result.scrape_failures == 0
    assert 20e6 < result.rss_bytes < 2e9 and result.cpu_cores > 0
