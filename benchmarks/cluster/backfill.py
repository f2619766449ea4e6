"""Turns the synthetic cluster into a Prometheus TSDB with Prometheus' own tools.

1. Record each node type's history from the exporter (`node_history`, one process per type).
2. Write the cluster as OpenMetrics text, a chunk of nodes at a time, and feed each chunk to
   `promtool tsdb create-blocks-from openmetrics` while the next one is written; two promtool
   runs at once, each chunk file deleted as soon as its block exists (the whole history is about
   100 GB of text; a few chunks are on disk at any time).
3. Start a real Prometheus on the blocks, which compacts the overlapping chunk blocks into one.
4. Backfill the bundle's recording rules with `promtool tsdb create-blocks-from rules`, one
   dependency level at a time (a rule that reads another rule's series needs that rule's blocks
   loaded first), restarting Prometheus after each level so it loads the new blocks.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.cluster import node_history
from benchmarks.cluster.synthetic import (
    STEP_SECONDS,
    HistoryWriter,
    NodeType,
    Scale,
    write_node,
    write_pending,
    write_pods,
)
from benchmarks.processes import REPO, free_port

Progress = Callable[[str], None]
RULES_FILE = REPO / "alerts" / "prometheus_rules.yaml"
# kube-prometheus-stack evaluates rules every 30 s; the backfill writes the same resolution.
RULE_EVAL_INTERVAL = "30s"
_ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


@dataclass
class BackfillStats:
    nodes: int = 0
    series: int = 0
    samples: int = 0
    text_bytes: int = 0
    seconds_recording: float = 0.0
    seconds_openmetrics: float = 0.0
    seconds_compaction: float = 0.0
    seconds_rules: float = 0.0
    rule_levels: int = 0
    series_per_type: dict[str, int] = field(default_factory=dict)


BLOCK_SECONDS = 2 * 3600


def window(scale: Scale, now: float | None = None) -> tuple[int, int]:
    """A window inside the last whole 2 h block range: one block, so promtool reads its input
    once for the block (and once for the time range)."""
    start = int((time.time() if now is None else now) // BLOCK_SECONDS - 1) * BLOCK_SECONDS
    if scale.window_seconds > BLOCK_SECONDS:
        raise ValueError("the window must fit one 2 h block")
    return start, start + scale.window_seconds


def promtool() -> str:
    from kube_gpu_exporter.bundle.localstack.processes import find_binary

    return find_binary("promtool", package="prometheus")


def record_types(fleets: list[str], steps: int, workdir: Path) -> dict[str, NodeType]:
    def one(fleet: str) -> NodeType:
        out = workdir / f"history-{fleet}.pickle"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.cluster.node_history",
                fleet,
                str(steps),
                str(STEP_SECONDS),
                str(out),
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        return NodeType.of(node_history.load(out))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(fleets, pool.map(one, fleets), strict=True))


def _move_blocks(source: Path, data: Path) -> int:
    moved = 0
    for block in source.iterdir():
        if _ULID.match(block.name):
            shutil.move(str(block), data / block.name)
            moved += 1
    shutil.rmtree(source)
    return moved


def _create_blocks(chunk: Path, data: Path) -> None:
    # An output directory per run: two promtool runs writing into one directory lose blocks.
    out = chunk.with_suffix(".blocks")
    proc = subprocess.run(
        [promtool(), "tsdb", "create-blocks-from", "openmetrics", str(chunk), str(out)],
        capture_output=True,
        text=True,
    )
    chunk.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"promtool create-blocks-from openmetrics: {proc.stderr[-1000:]}")
    if _move_blocks(out, data) == 0:
        raise RuntimeError(f"promtool made no block of {chunk.name}: {proc.stdout[-500:]}")


def write_history(
    scale: Scale,
    types: dict[str, NodeType],
    start: int,
    workdir: Path,
    blocks: Path,
    progress: Progress,
    stats: BackfillStats,
) -> None:
    nodes = scale.nodes
    stats.nodes = len(nodes)
    per_chunk = scale.nodes_per_chunk
    with ThreadPoolExecutor(max_workers=2) as pool:
        pending: list[Any] = []
        for number, first in enumerate(range(0, len(nodes), per_chunk)):
            chunk_nodes = nodes[first : first + per_chunk]
            path = workdir / f"chunk-{number:03d}.om"
            with path.open("w") as out:
                writer = HistoryWriter(out, start, scale.steps)
                for fleet, n in chunk_nodes:
                    allocations = write_node(writer, types[fleet], n, scale.offset(n))
                    write_pods(writer, n, allocations)
                if number == 0:
                    write_pending(writer)
                writer.close()
            stats.series += writer.series
            stats.samples += writer.samples
            stats.text_bytes += path.stat().st_size
            # At most two chunks wait for promtool while the next is written: bounded disk.
            while len([f for f in pending if not f.done()]) >= 2:
                time.sleep(0.2)
            for f in pending:
                if f.done():
                    f.result()
            pending.append(pool.submit(_create_blocks, path, blocks))
            progress(
                f"  chunk {number + 1}: nodes up to {chunk_nodes[-1][1] + 1}, "
                f"{stats.samples / 1e6:,.0f} M samples so far"
            )
        for f in pending:
            f.result()


@dataclass
class Rule:
    record: str
    expr: str
    labels: dict[str, str]
    group: str
    # The group's own evaluation interval; None for Prometheus' global one.
    interval: str | None = None


def recording_rules(path: Path = RULES_FILE) -> list[Rule]:
    document = yaml.safe_load(path.read_text())
    return [
        Rule(r["record"], r["expr"], dict(r.get("labels") or {}), g["name"], g.get("interval"))
        for g in document["groups"]
        for r in g["rules"]
        if "record" in r
    ]


def rule_levels(rules: list[Rule]) -> list[list[Rule]]:
    """Rules in dependency order: level 0 reads only scraped series, level n reads level n-1."""
    names = {r.record for r in rules}
    level: dict[str, int] = {}

    def depth(record: str, seen: frozenset[str] = frozenset()) -> int:
        if record in level:
            return level[record]
        if record in seen:
            raise ValueError(f"recording rule {record} depends on itself")
        reads = {
            n
            for r in rules
            if r.record == record
            for n in names
            if re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", r.expr)
        }
        level[record] = 1 + max((depth(n, seen | {record}) for n in reads), default=-1)
        return level[record]

    for r in rules:
        depth(r.record)
    out: list[list[Rule]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for r in rules:
        out[level[r.record]].append(r)
    return out


def rules_document(rules: list[Rule]) -> str:
    """The rules in their groups, each group with its own interval, which promtool honours."""
    groups: dict[str, dict[str, Any]] = {}
    for r in rules:
        rule: dict[str, Any] = {"record": r.record, "expr": r.expr}
        if r.labels:
            rule["labels"] = r.labels
        group = groups.setdefault(r.group, {"name": r.group})
        if r.interval:
            group["interval"] = r.interval
        group.setdefault("rules", []).append(rule)
    return yaml.safe_dump({"groups": list(groups.values())}, sort_keys=False)


def self_metric(url: str, name: str) -> float:
    """The sum of a metric's samples on a Prometheus server's own /metrics page."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    values = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return sum(float(v) for v in values) if values else float("nan")


class Prometheus:
    """A real Prometheus over the backfilled TSDB, restartable so it loads new blocks."""

    def __init__(self, data: Path, workdir: Path) -> None:
        from kube_gpu_exporter.bundle.localstack.processes import ChildProcess, find_binary

        self.port = free_port()
        self.data = data
        config = workdir / "prometheus-cluster.yml"
        config.write_text("global: {scrape_interval: 15s}\nscrape_configs: []\n")
        self.child = ChildProcess(
            "prometheus",
            [
                find_binary("prometheus", package="prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                "--storage.tsdb.retention.time=30d",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--query.timeout=5m",
                # Raw dashboard queries at 1,000 nodes can touch more than the 50 M default.
                "--query.max-samples=500000000",
            ],
            workdir / "prometheus-cluster.log",
            f"http://127.0.0.1:{self.port}/-/ready",
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.child.start(timeout=600)

    def stop(self) -> None:
        self.child.stop(timeout=120)

    def restart(self) -> None:
        self.stop()
        self.start()

    def wait_compacted(self, timeout: float = 3600) -> None:
        """Until the overlapping blocks are merged into one per time range."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            blocks = [p for p in self.data.iterdir() if _ULID.match(p.name)]
            if self_metric(self.url, "prometheus_tsdb_blocks_loaded") == 1 and len(blocks) == 1:
                return
            time.sleep(5)
        raise RuntimeError("Prometheus did not finish compacting the backfilled blocks")


def backfill_rules(
    prometheus: Prometheus,
    start: int,
    end: int,
    workdir: Path,
    progress: Progress,
    stats: BackfillStats,
) -> None:
    levels = rule_levels(recording_rules())
    stats.rule_levels = len(levels)
    for number, rules in enumerate(levels):
        rules_path = workdir / f"rules-level-{number}.yaml"
        rules_path.write_text(rules_document(rules))
        out = workdir / f"rule-blocks-{number}"
        progress(f"  rule level {number}: {len(rules)} recording rules")
        proc = subprocess.run(
            [
                promtool(),
                "tsdb",
                "create-blocks-from",
                "rules",
                f"--start={start}",
                f"--end={end - 1}",
                f"--url={prometheus.url}",
                f"--output-dir={out}",
                f"--eval-interval={RULE_EVAL_INTERVAL}",
                str(rules_path),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"promtool create-blocks-from rules: {proc.stderr[-1000:]}")
        if _move_blocks(out, prometheus.data) == 0:
            raise RuntimeError(f"rule level {number} produced no blocks: {proc.stdout[-500:]}")
        prometheus.restart()
