"""Latency of every dashboard query against the 1,000-node Prometheus, as Grafana sends them.

Variables take what a freshly opened dashboard shows (All where offered, else the first value),
macros are Grafana's for the bundle's 1 m minimum interval, and range panels ask for the whole
backfilled window at a 60 s step. Each query runs once cold and then `repeats` times; the median
of the repeats is reported. Queries that read recording rules also run inlined
(`inline_rules`), which is what they would cost without the rules. Every recording rule's own
expression is timed as one evaluation at the window's end, which is what the rule costs the
Prometheus that evaluates it every 30 s.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, replace

from benchmarks.cluster.backfill import RULE_EVAL_INTERVAL, Rule, recording_rules
from benchmarks.cluster.inline_rules import Inliner
from benchmarks.processes import REPO
from kube_gpu_exporter.bundle.localstack.grafana_queries import (
    PanelQuery,
    macros,
    panel_queries,
    resolve_variables,
    substitute,
)
from kube_gpu_exporter.bundle.localstack.prometheus_api import PrometheusAPI, PrometheusAPIError

DASHBOARDS = tuple(sorted((REPO / "dashboards" / "provisioned").glob("*.json")))
STEP_SECONDS = 60
SCRAPE_INTERVAL_SECONDS = 15


@dataclass
class Timed:
    cold_ms: float
    warm_ms: float  # median of the repeats
    series: int
    error: str | None = None


@dataclass
class QueryResult:
    dashboard: str
    panel: str
    instant: bool
    expr: str
    with_rules: Timed
    without_rules: Timed | None  # None: the query reads no recording rule


@dataclass
class RuleCost:
    group: str
    record: str
    timed: Timed


def _timed(api: PrometheusAPI, expr: str, instant: bool, start: float, end: float, repeats: int):
    def once() -> tuple[float, int]:
        began = time.perf_counter()
        if instant:
            result = api.query(expr, end)
        else:
            result = api.query_range(expr, start, end, STEP_SECONDS)
        return (time.perf_counter() - began) * 1e3, len(result)

    try:
        cold, series = once()
        warm = [once()[0] for _ in range(repeats)]
    except PrometheusAPIError as exc:
        return Timed(float("nan"), float("nan"), 0, str(exc).splitlines()[0][:200])
    return Timed(cold, statistics.median(warm), series)


def inliner() -> Inliner:
    return Inliner(recording_rules(), RULE_EVAL_INTERVAL)


def grafana_queries(api: PrometheusAPI, start: float, end: float) -> list[PanelQuery]:
    """Every panel query of the bundle's dashboards as Grafana sends it for [start, end]."""
    queries: list[PanelQuery] = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        variables = resolve_variables(dashboard, api, start, select_all=True)
        grafana = macros(dashboard, SCRAPE_INTERVAL_SECONDS, int(end - start))
        queries.extend(
            replace(q, expr=substitute(q.expr, variables, grafana))
            for q in panel_queries(dashboard)
        )
    return queries


def dashboard_queries(
    url: str, start: float, end: float, repeats: int = 3, progress=print
) -> list[QueryResult]:
    api = PrometheusAPI(url, timeout=600)
    inline = inliner()
    results = []
    queries = grafana_queries(api, start, end)
    progress(f"  {len(queries)} panel queries")
    for query in queries:
        with_rules = _timed(api, query.expr, query.instant, start, end, repeats)
        without = None
        if inline.uses_rules(query.expr):
            without = _timed(api, inline.inline(query.expr), query.instant, start, end, repeats)
        results.append(
            QueryResult(
                query.dashboard, query.panel, query.instant, query.expr, with_rules, without
            )
        )
    return results


def rule_costs(url: str, at: float, repeats: int = 3) -> list[RuleCost]:
    api = PrometheusAPI(url, timeout=600)
    rules: list[Rule] = recording_rules()
    return [RuleCost(r.group, r.record, _timed(api, r.expr, True, at, at, repeats)) for r in rules]
