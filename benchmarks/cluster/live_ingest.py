"""What one Prometheus spends to scrape the synthetic cluster live: head series, memory and CPU.

A backfilled block says how fast queries are, not what ingesting the same cluster costs. Here a
real Prometheus scrapes every node of the cluster every 15 s for a few minutes, from one server
that plays all the exporters (each node's exposition, at the step of its history that the clock
has reached), and its own metrics tell the head's series count, its memory and its CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from benchmarks.cluster.backfill import self_metric
from benchmarks.cluster.synthetic import STEP_SECONDS, NodeType, Scale, node_name
from benchmarks.processes import free_port, pinned, proc_sample


@dataclass
class IngestResult:
    nodes: int
    seconds: float
    head_series: float
    samples_per_second: float
    rss_bytes: int
    heap_inuse_bytes: float
    cpu_cores: float  # Prometheus' CPU seconds per second over the last part of the run
    scrape_failures: float


class ClusterServer:
    """Every node's /metrics on one port, at /node/N, rendered once per node per step."""

    def __init__(self, scale: Scale, types: dict[str, NodeType]) -> None:
        self._nodes = {n: types[fleet] for fleet, n in scale.nodes}
        self._scale = scale
        self._series: dict[int, list[str]] = {}
        self._cache: dict[int, tuple[int, bytes]] = {}
        self.port = free_port()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _body(self, n: int) -> bytes:
        step = int(time.time() // STEP_SECONDS)
        cached = self._cache.get(n)
        if cached is not None and cached[0] == step:
            return cached[1]
        node_type = self._nodes[n]
        # Without the target labels: Prometheus adds job, instance and node itself.
        keys = self._series.get(n)
        if keys is None:
            keys = self._series[n] = node_type.series_for(n, with_target=False)
        column = (step + self._scale.offset(n)) % len(node_type.history.values)
        lines = [
            f"{key} {values[column]}\n"
            for key, values in zip(keys, node_type.columns, strict=True)
            if values[column] is not None
        ]
        body = gzip.compress("".join(lines).encode(), 1)
        self._cache[n] = (step, body)
        return body

    async def _metrics(self, request: web.Request) -> web.Response:
        body = self._body(int(request.match_info["n"]))
        return web.Response(
            body=body,
            headers={"Content-Type": "text/plain; version=0.0.4", "Content-Encoding": "gzip"},
        )

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_get("/node/{n}", self._metrics)
            runner = web.AppRunner(app, access_log=None)
            self._loop.run_until_complete(runner.setup())
            self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(runner.cleanup())

        self._thread = threading.Thread(target=run, name="cluster-server", daemon=True)
        self._thread.start()
        ready.wait(30)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


def scrape_config(scale: Scale, port: int) -> str:
    lines = [
        "global: {scrape_interval: 15s, scrape_timeout: 10s}",
        "scrape_configs:",
        "- job_name: kube-gpu-exporter",
        "  honor_labels: true",
        "  static_configs:",
    ]
    for _, n in scale.nodes:
        lines.append(
            f"  - targets: ['127.0.0.1:{port}']\n"
            f"    labels: {{__metrics_path__: /node/{n}, instance: '{node_name(n)}:9455', "
            f"node: {node_name(n)}}}"
        )
    return "\n".join(lines) + "\n"


def measure(
    scale: Scale, types: dict[str, NodeType], workdir: Path, seconds: float = 300.0
) -> IngestResult:
    from kube_gpu_exporter.bundle.localstack.processes import ChildProcess, find_binary
    from kube_gpu_exporter.bundle.localstack.prometheus_api import PrometheusAPI

    server = ClusterServer(scale, types)
    # The playing exporters stay on CPU 0, Prometheus gets CPU 1.
    affinity = os.sched_getaffinity(0)
    if len(affinity) > 1:
        os.sched_setaffinity(0, {min(affinity)})
    server.start()
    port = free_port()
    config = workdir / "prometheus-live.yml"
    config.write_text(scrape_config(scale, server.port))
    prometheus = ChildProcess(
        "prometheus",
        pinned(
            1,
            [
                find_binary("prometheus", package="prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'live-data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
        ),
        workdir / "prometheus-live.log",
        f"http://127.0.0.1:{port}/-/ready",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        prometheus.start(timeout=120)
        began = time.monotonic()
        # Rates over the second half only: the first scrapes create every series.
        time.sleep(seconds / 2)
        pid = prometheus.pid
        assert pid is not None
        appended = "prometheus_tsdb_head_samples_appended_total"
        before = (proc_sample(pid).cpu_seconds, self_metric(url, appended), time.monotonic())
        time.sleep(seconds / 2)
        sample = proc_sample(pid)
        elapsed = time.monotonic() - before[2]
        failures = PrometheusAPI(url, timeout=60).query(
            'count(min_over_time(up{job="kube-gpu-exporter"}[10m]) == 0) or vector(0)'
        )
        return IngestResult(
            nodes=len(scale.nodes),
            seconds=time.monotonic() - began,
            head_series=self_metric(url, "prometheus_tsdb_head_series"),
            samples_per_second=(self_metric(url, appended) - before[1]) / elapsed,
            rss_bytes=sample.rss_bytes,
            heap_inuse_bytes=self_metric(url, "go_memstats_heap_inuse_bytes"),
            cpu_cores=(sample.cpu_seconds - before[0]) / elapsed,
            scrape_failures=float(failures[0]["value"][1]) if failures else float("nan"),
        )
    finally:
        with contextlib.suppress(Exception):
            prometheus.stop(timeout=60)
        server.stop()
        os.sched_setaffinity(0, affinity)
