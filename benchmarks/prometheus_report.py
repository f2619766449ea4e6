"""The Prometheus side's results as markdown: the backfill, series per node against
dcgm-exporter's defaults, every dashboard query with and without the recording rules, and what
each recording rule costs to evaluate."""

from __future__ import annotations

import math
from collections import defaultdict

from benchmarks.prometheus_side import ClusterResult

QUERY_TARGET_MS = 1000.0
GB = 1e9
MB = 1e6


def _ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def summary(r: ClusterResult) -> list[str]:
    s = r.stats
    hours = r.scale.window_seconds / 3600
    return [
        f"Cluster: {s.nodes:,} nodes, {r.gpus:,} GPUs, {r.mig_instances:,} MIG instances; "
        f"{hours:g} h at a 15 s scrape interval; {s.series:,} series, {s.samples / 1e6:,.0f} M "
        f"samples, {s.text_bytes / GB:,.1f} GB of OpenMetrics text.",
        f"Backfill: node types recorded from the exporter in {s.seconds_recording:,.0f} s; "
        f"text written and turned into blocks by promtool in {s.seconds_openmetrics:,.0f} s; "
        f"Prometheus merged the overlapping chunk blocks in {s.seconds_compaction:,.0f} s; "
        f"{s.rule_levels} levels of recording rules backfilled in {s.seconds_rules:,.0f} s. "
        f"Blocks on disk: {r.block_bytes / MB:,.0f} MB "
        f"({r.block_bytes / max(s.samples, 1):.2f} bytes per sample, recorded series included).",
        f"Prometheus RSS after all queries: {r.prometheus_rss_bytes / MB:,.0f} MB "
        f"(peak {r.prometheus_peak_rss_bytes / MB:,.0f} MB); the data sits in a persisted block, "
        "so this is not the memory of ingesting it live (see the scaling notes).",
    ]


def cardinality(r: ClusterResult) -> list[str]:
    lines = [
        "| node type | nodes | series per node | in dcgm-exporter's default set | "
        "exporter health, capacity, pods | other DCGM-named (ECC, clock events, GPM, XID) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    totals: defaultdict[str, int] = defaultdict(int)
    for group in r.scale.cluster:
        c = r.per_node[group.fleet]
        lines.append(
            f"| `{group.fleet}` | {group.count:,} | {c.total:,} | {c.dcgm_default:,} | "
            f"{c.exporter_own:,} | {c.dcgm_extra:,} |"
        )
        for key in ("total", "dcgm_default", "exporter_own", "dcgm_extra"):
            totals[key] += getattr(c, key) * group.count
    lines.append(
        f"| cluster | {r.stats.nodes:,} | {totals['total']:,} | {totals['dcgm_default']:,} | "
        f"{totals['exporter_own']:,} | {totals['dcgm_extra']:,} |"
    )
    return lines


def queries(r: ClusterResult) -> list[str]:
    lines = [
        "| dashboard | panel | kind | series | with rules: first / median ms | "
        "without rules: first / median ms | without / with |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for q in r.queries:
        w, o = q.with_rules, q.without_rules
        kind = "instant" if q.instant else "range"
        error = f" ({w.error})" if w.error else ""
        if o is None:
            raw, ratio = "no rules read", "-"
        elif o.error:
            raw, ratio = f"failed: {o.error}", "-"
        else:
            raw = f"{_ms(o.cold_ms)} / {_ms(o.warm_ms)}"
            ratio = f"{o.warm_ms / w.warm_ms:,.1f}x" if w.warm_ms > 0 else "-"
        lines.append(
            f"| {q.dashboard.removeprefix('GPU / ')} | {q.panel} | {kind} | {w.series:,} | "
            f"{_ms(w.cold_ms)} / {_ms(w.warm_ms)}{error} | {raw} | {ratio} |"
        )
    return lines


def rules(r: ClusterResult) -> list[str]:
    groups: dict[str, float] = defaultdict(float)
    for cost in r.rules:
        groups[cost.group] += cost.timed.warm_ms
    slowest = sorted(r.rules, key=lambda c: c.timed.warm_ms, reverse=True)[:3]
    return [
        f"- One evaluation of each rule group at {r.stats.nodes:,} nodes (the sum of its rules' "
        "medians): "
        + "; ".join(f"`{g}` {_ms(ms)} ms" for g, ms in groups.items())
        + ". Slowest rules: "
        + "; ".join(f"`{c.record}` {_ms(c.timed.warm_ms)} ms" for c in slowest)
        + ".",
    ]


def verdict(r: ClusterResult) -> list[str]:
    timed = [q for q in r.queries if not q.with_rules.error]
    failed = len(r.queries) - len(timed)
    worst = max(timed, key=lambda q: q.with_rules.warm_ms)
    worst_cold = max(timed, key=lambda q: q.with_rules.cold_ms)
    # (query, its timing without the rules) of the queries that read a recording rule.
    raw = [(q, w) for q in timed if (w := q.without_rules) is not None and not w.error]
    over = [q for q, w in raw if w.warm_ms >= QUERY_TARGET_MS]
    met = worst.with_rules.warm_ms < QUERY_TARGET_MS and failed == 0
    lines = [
        f"- Target: every dashboard query under {QUERY_TARGET_MS / 1000:g} s at "
        f"{r.stats.nodes:,} nodes with the recording rules: slowest median "
        f"{_ms(worst.with_rules.warm_ms)} ms ({worst.panel}), slowest first run "
        f"{_ms(worst_cold.with_rules.cold_ms)} ms ({worst_cold.panel}); "
        f"{failed} failed: {'met' if met else 'MISSED'}.",
    ]
    if raw:
        slowest_raw, slowest_timing = max(raw, key=lambda pair: pair[1].warm_ms)
        lines.append(
            f"- Without the rules, {len(over)} of the {len(raw)} queries that read them take "
            f"{QUERY_TARGET_MS / 1000:g} s or more; the slowest, {slowest_raw.panel}, "
            f"{_ms(slowest_timing.warm_ms)} ms."
        )
    return lines


def ingest(r: ClusterResult) -> list[str]:
    i = r.ingest
    if i is None:
        return []
    per_series = i.rss_bytes / max(i.head_series, 1)
    per_kilo_samples = i.cpu_cores / max(i.samples_per_second / 1000, 1e-9)
    return [
        f"- Live: one Prometheus scraping all {i.nodes:,} nodes every 15 s for "
        f"{i.seconds / 60:.0f} min held {i.head_series:,.0f} head series and appended "
        f"{i.samples_per_second:,.0f} samples/s, with {i.rss_bytes / MB:,.0f} MB RSS "
        f"({i.heap_inuse_bytes / MB:,.0f} MB Go heap in use; {per_series / 1000:.1f} KB RSS per "
        f"series) and {i.cpu_cores:.2f} cores ({per_kilo_samples * 1000:.1f} millicores per "
        f"1,000 samples/s); {i.scrape_failures:.0f} targets had a failed scrape.",
    ]


def render(r: ClusterResult) -> str:
    lines = [
        "### Prometheus side",
        "",
        *summary(r),
        "",
        *cardinality(r),
        "",
        *queries(r),
        "",
        *rules(r),
        *ingest(r),
        *verdict(r),
    ]
    return "\n".join(lines) + "\n"
