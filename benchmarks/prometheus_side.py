"""The Prometheus side of `make bench`: two hours of a simulated 1,000-node cluster backfilled
with promtool into a real Prometheus, the bundle's recording rules backfilled on top, and every
dashboard query timed with and without them (`benchmarks/cluster/`)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.cluster import live_ingest
from benchmarks.cluster.backfill import (
    BackfillStats,
    Prometheus,
    backfill_rules,
    record_types,
    window,
    write_history,
)
from benchmarks.cluster.cardinality import NodeCardinality, node_cardinality
from benchmarks.cluster.dashboard_queries import (
    QueryResult,
    RuleCost,
    dashboard_queries,
    rule_costs,
)
from benchmarks.cluster.live_ingest import IngestResult
from benchmarks.cluster.synthetic import NodeType, Scale
from benchmarks.processes import proc_sample
from benchmarks.simulated import fleet_spec


@dataclass
class ClusterResult:
    scale: Scale
    start: int
    end: int
    stats: BackfillStats
    gpus: int
    mig_instances: int
    per_node: dict[str, NodeCardinality]
    block_bytes: int
    prometheus_rss_bytes: int
    prometheus_peak_rss_bytes: int
    queries: list[QueryResult] = field(default_factory=list)
    rules: list[RuleCost] = field(default_factory=list)
    ingest: IngestResult | None = None


def _blocks_size(data: Path) -> int:
    return sum(p.stat().st_size for p in data.rglob("*") if p.is_file() and "wal" not in p.parts)


@dataclass
class Backfilled:
    prometheus: Prometheus
    start: int
    end: int
    stats: BackfillStats
    types: dict[str, NodeType]
    data: Path


@contextlib.contextmanager
def backfilled(
    scale: Scale,
    workdir: Path,
    progress: Callable[[str], None] = print,
    compact: bool = True,
) -> Iterator[Backfilled]:
    """A running Prometheus over the synthetic cluster's history and its recorded rules.
    `compact`: wait until Prometheus has merged the overlapping blocks into one, as a
    long-running server would have; without it queries read across the chunks' blocks."""
    stats = BackfillStats()
    start, end = window(scale)
    fleets = [g.fleet for g in scale.cluster]
    data = workdir / "data"
    data.mkdir()
    began = time.monotonic()
    progress(f"recording {len(fleets)} node types, {scale.history_steps} steps each")
    types = record_types(fleets, scale.history_steps, workdir)
    stats.seconds_recording = time.monotonic() - began
    began = time.monotonic()
    progress(f"writing {len(scale.nodes)} nodes as OpenMetrics, promtool to blocks")
    write_history(scale, types, start, workdir, data, progress, stats)
    stats.seconds_openmetrics = time.monotonic() - began
    prometheus = Prometheus(data, workdir)
    began = time.monotonic()
    progress("Prometheus: loading and compacting the blocks")
    prometheus.start()
    try:
        if compact:
            prometheus.wait_compacted()
        stats.seconds_compaction = time.monotonic() - began
        began = time.monotonic()
        progress("promtool: backfilling the recording rules")
        backfill_rules(prometheus, start, end, workdir, progress, stats)
        if compact:
            prometheus.wait_compacted()
        stats.seconds_rules = time.monotonic() - began
        yield Backfilled(prometheus, start, end, stats, types, data)
    finally:
        prometheus.stop()


def run(
    scale: Scale,
    progress: Callable[[str], None] = print,
    repeats: int = 3,
    workdir_parent: str | None = None,
    ingest_seconds: float = 300.0,
) -> ClusterResult:
    workdir = Path(tempfile.mkdtemp(prefix="kge-cluster-", dir=workdir_parent))
    try:
        with backfilled(scale, workdir, progress) as cluster:
            progress("timing the dashboards' queries")
            url = cluster.prometheus.url
            queries = dashboard_queries(url, cluster.start, cluster.end, repeats, progress)
            progress("timing one evaluation of each recording rule")
            rules = rule_costs(url, cluster.end - 30, repeats)
            pid = cluster.prometheus.child.pid
            sample = proc_sample(pid) if pid else None
            block_bytes = _blocks_size(cluster.data)
        ingest = None
        if ingest_seconds > 0:
            progress(
                f"a live Prometheus scraping all {len(scale.nodes)} nodes for {ingest_seconds:g} s"
            )
            ingest = live_ingest.measure(scale, cluster.types, workdir, ingest_seconds)
        specs = {g.fleet: fleet_spec(g.fleet) for g in scale.cluster}
        counts = {g.fleet: g.count for g in scale.cluster}
        return ClusterResult(
            scale=scale,
            start=cluster.start,
            end=cluster.end,
            stats=cluster.stats,
            gpus=sum(len(specs[f].gpus) * n for f, n in counts.items()),
            mig_instances=sum(
                sum(len(g.mig or ()) for g in specs[f].gpus) * n for f, n in counts.items()
            ),
            per_node={f: node_cardinality(t.history.series) for f, t in cluster.types.items()},
            block_bytes=block_bytes,
            prometheus_rss_bytes=sample.rss_bytes if sample else 0,
            prometheus_peak_rss_bytes=sample.peak_rss_bytes if sample else 0,
            queries=queries,
            rules=rules,
            ingest=ingest,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
