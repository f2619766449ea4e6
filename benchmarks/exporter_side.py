"""The exporter side of `make bench`: the exporter, a baseline written the common way and
nvitop-exporter, each on the same simulated node, measured one after the other in one run.

For every fleet and participant: the participant runs pinned to CPU 0 with the fake kubelet in a
process of its own; a real Prometheus on CPU 1 scrapes it every 15 s while CPU time and RSS are
read from /proc over a quiet window; then wrk (on CPU 1) drives /metrics at 1, 16 and 64
concurrent clients, with and without gzip, interleaved over several runs. In-process figures
(render time per snapshot, NVML calls per sweep) come from `benchmarks.inprocess`.
"""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import wrk
from benchmarks.processes import (
    REPO,
    ProcSample,
    fake_kubelet,
    free_port,
    pinned,
    proc_sample,
    stop,
    wait_ready,
)
from benchmarks.simulated import fleet_spec

FLEETS = ("one-gpu", "default", "mig-56", "sixteen-gpus")
PARTICIPANTS = ("ours", "baseline", "nvitop")
CLIENTS = (1, 16, 64)
# Every participant polls NVML at the exporter's default interval, so they do the same work.
# (nvitop-exporter's own default is 1 s.)
POLL_INTERVAL_SECONDS = 5


@dataclass(frozen=True)
class Settings:
    fleets: tuple[str, ...] = FLEETS
    participants: tuple[str, ...] = PARTICIPANTS
    clients: tuple[int, ...] = CLIENTS
    wrk_seconds: int = 4
    runs: int = 3
    warmup_seconds: float = 20.0
    cpu_window_seconds: float = 60.0
    # One Prometheus scraping as the bundle's scrape configs do.
    scrape_interval: str = "15s"
    scrape_timeout: str = "10s"


@dataclass
class LatencyRow:
    clients: int
    gzip: bool
    p50_ms: float
    p99_ms: float
    p99_low: float
    p99_high: float
    rps: float
    errors: int


@dataclass
class Measured:
    participant: str
    series: int
    body_bytes: int
    gzip_bytes: int | None  # None: the participant does not compress
    cpu_seconds_per_hour: float
    steady_rss_bytes: int
    peak_rss_bytes: int
    threads: int
    # scrape_duration_seconds seen by the real Prometheus, over its successful scrapes; None if
    # none succeeded. Failures (past scrape_timeout, e.g. behind the latency runs' load) are
    # counted apart so one slow scrape does not hide the figure.
    prometheus_scrape_seconds: float | None
    prometheus_scrape_failures: int
    latency: list[LatencyRow] = field(default_factory=list)


@dataclass
class FleetResult:
    fleet: str
    gpus: int
    mig_instances: int
    inprocess: dict[str, dict[str, Any]]
    measured: dict[str, Measured]


def participant_argv(name: str, fleet: str, port: int, socket_path: str) -> list[str]:
    base = [sys.executable, "-m", "benchmarks.simulated", fleet, name]
    if name == "ours":
        return [
            *base,
            f"--web.listen-address=127.0.0.1:{port}",
            f"--podresources.socket={socket_path}",
            f"--node-name={fleet_spec(fleet).node_name}",
            f"--collector.interval={POLL_INTERVAL_SECONDS}s",
            "--log.level=warn",
        ]
    if name == "baseline":
        return [*base, str(port), socket_path, str(POLL_INTERVAL_SECONDS)]
    if name == "nvitop":
        return [*base, str(port), str(POLL_INTERVAL_SECONDS)]
    raise ValueError(f"unknown participant {name!r}")


def exposition(port: int) -> tuple[int, int, int | None]:
    """(series, body bytes, gzip body bytes or None) of what the participant serves."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=30) as response:
        packed = response.read()
        compressed = response.headers.get("Content-Encoding") == "gzip"
    if compressed:
        gzip.decompress(packed)  # a corrupt body would fail here, not later in a table
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return series, len(body), len(packed) if compressed else None


class BenchPrometheus:
    """A real Prometheus scraping the targets on these ports, as job "bench"."""

    def __init__(
        self,
        target_ports: Sequence[int],
        workdir: Path,
        scrape_interval: str,
        scrape_timeout: str,
        replica: str | None = None,
    ) -> None:
        """`replica`: one server of an HA pair, told from the other by its external label
        `prometheus_replica`, as kube-prometheus-stack's are (Prometheus also derives each
        target's scrape offset from its external labels, so the pair scrapes at two offsets)."""
        from kube_gpu_exporter.bundle.localstack.processes import ChildProcess, find_binary

        self.port = free_port()
        config = workdir / "prometheus.yml"
        targets = ", ".join(f"'127.0.0.1:{port}'" for port in target_ports)
        labels = "" if replica is None else f", external_labels: {{prometheus_replica: {replica}}}"
        config.write_text(
            f"global: {{scrape_interval: {scrape_interval}, scrape_timeout: {scrape_timeout}"
            f"{labels}}}\n"
            "scrape_configs:\n"
            "- job_name: bench\n"
            f"  static_configs: [{{targets: [{targets}]}}]\n"
        )
        binary = find_binary("prometheus", package="prometheus")
        self.child = ChildProcess(
            "prometheus",
            pinned(
                1,
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
            ),
            workdir / "prometheus.log",
            f"http://127.0.0.1:{self.port}/-/ready",
        )

    def __enter__(self) -> BenchPrometheus:
        self.child.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.child.stop()

    def scrape_times(self, target_port: int) -> list[float]:
        """When this server scraped the target so far, Unix seconds, oldest first."""
        from kube_gpu_exporter.bundle.localstack.prometheus_api import PrometheusAPI

        api = PrometheusAPI(f"http://127.0.0.1:{self.port}")
        series = api.query(f'up{{job="bench",instance="127.0.0.1:{target_port}"}}[1h]')
        return sorted(float(t) for t, _ in series[0]["values"]) if series else []

    def scrape_seconds(self, target_port: int) -> tuple[float | None, int]:
        """Mean duration of the run's successful scrapes of one target (None if none), and how
        many failed."""
        from kube_gpu_exporter.bundle.localstack.prometheus_api import PrometheusAPI

        api = PrometheusAPI(f"http://127.0.0.1:{self.port}")
        selector = f'job="bench",instance="127.0.0.1:{target_port}"'

        def raw(metric: str) -> dict[float, float]:
            # A range selector returns the stored samples themselves, one per scrape.
            series = api.query(f"{metric}{{{selector}}}[1h]")
            return {float(t): float(v) for t, v in series[0]["values"]} if series else {}

        up, durations = raw("up"), raw("scrape_duration_seconds")
        ok = [durations[t] for t, value in up.items() if value == 1 and t in durations]
        failures = sum(1 for value in up.values() if value != 1)
        return (statistics.fmean(ok) if ok else None), failures


def quiet_window(pid: int, start: ProcSample, seconds: float) -> tuple[list[ProcSample], float]:
    """Samples of `pid` about once a second for at least `seconds`, and how long that took.

    /proc counts CPU time in clock ticks (10 ms at the usual 100 Hz), so a short window over a
    quiet process can read no CPU at all; the window then goes on, up to four times its length,
    until a tick has been counted. Windows of the real benchmark's length never need to."""
    began = time.monotonic()
    shortest, longest = began + seconds, began + 4 * seconds
    samples: list[ProcSample] = []
    while True:
        now = time.monotonic()
        if (
            samples
            and now >= shortest
            and (samples[-1].cpu_seconds > start.cpu_seconds or now >= longest)
        ):
            return samples, now - began
        time.sleep(min(1.0, max(0.1, shortest - now)))
        samples.append(proc_sample(pid))


def measure_participant(
    name: str, fleet: str, socket_path: str, settings: Settings, workdir: Path
) -> Measured:
    port = free_port()
    log = (workdir / f"{name}.log").open("wb")
    process = subprocess.Popen(
        pinned(0, participant_argv(name, fleet, port, socket_path)),
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_ready(port, "/readyz" if name == "ours" else "/metrics", timeout=60)
        prometheus_dir = workdir / f"prometheus-{name}"
        prometheus_dir.mkdir()
        with BenchPrometheus(
            [port], prometheus_dir, settings.scrape_interval, settings.scrape_timeout
        ) as prometheus:
            time.sleep(settings.warmup_seconds)
            start = proc_sample(process.pid)
            samples, seconds = quiet_window(process.pid, start, settings.cpu_window_seconds)
            end = samples[-1]
            cpu_per_hour = (end.cpu_seconds - start.cpu_seconds) / seconds * 3600
            rss = [sample.rss_bytes for sample in samples]
            series, body_bytes, gzip_bytes = exposition(port)
            latency = scrape_latency(port, settings)
            final = proc_sample(process.pid)
            scrape_seconds, scrape_failures = prometheus.scrape_seconds(port)
    finally:
        stop(process)
        log.close()
    return Measured(
        participant=name,
        series=series,
        body_bytes=body_bytes,
        gzip_bytes=gzip_bytes,
        cpu_seconds_per_hour=cpu_per_hour,
        steady_rss_bytes=int(statistics.median(rss)),
        peak_rss_bytes=final.peak_rss_bytes,
        threads=end.threads,
        prometheus_scrape_seconds=scrape_seconds,
        prometheus_scrape_failures=scrape_failures,
        latency=latency,
    )


def scrape_latency(port: int, settings: Settings) -> list[LatencyRow]:
    """Medians over `runs` rounds; the rounds interleave the combinations so drifts in the
    machine's load spread over all of them instead of landing on one."""
    url = f"http://127.0.0.1:{port}/metrics"
    combos = [(c, g) for g in (False, True) for c in settings.clients]
    samples: dict[tuple[int, bool], list[wrk.WrkResult]] = {k: [] for k in combos}
    for _ in range(settings.runs):
        for clients, use_gzip in combos:
            samples[(clients, use_gzip)].append(
                wrk.run(url, clients, use_gzip, settings.wrk_seconds)
            )
    rows = []
    for (clients, use_gzip), results in samples.items():
        p99s = [r.p99_ms for r in results]
        rows.append(
            LatencyRow(
                clients=clients,
                gzip=use_gzip,
                p50_ms=statistics.median(r.p50_ms for r in results),
                p99_ms=statistics.median(p99s),
                p99_low=min(p99s),
                p99_high=max(p99s),
                rps=statistics.median(r.rps for r in results),
                errors=sum(r.errors for r in results),
            )
        )
    return rows


def inprocess(fleet: str) -> dict[str, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.inprocess", fleet],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"in-process measurement of {fleet} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def measure_fleet(fleet: str, settings: Settings, progress=print) -> FleetResult:
    spec = fleet_spec(fleet)
    with tempfile.TemporaryDirectory(prefix=f"kge-bench-{fleet}-") as tmp:
        workdir = Path(tmp)
        # The kubelet shares CPU 1 with wrk and Prometheus: the participant has CPU 0 to itself.
        with fake_kubelet(fleet, workdir, cpu=1) as socket_path:
            progress(f"{fleet}: in-process render and NVML call counts")
            figures = inprocess(fleet)
            measured = {}
            for name in settings.participants:
                progress(f"{fleet}: {name}")
                measured[name] = measure_participant(name, fleet, socket_path, settings, workdir)
    return FleetResult(
        fleet=fleet,
        gpus=len(spec.gpus),
        mig_instances=sum(len(g.mig or ()) for g in spec.gpus),
        inprocess=figures,
        measured=measured,
    )


def run(settings: Settings, progress=print) -> list[FleetResult]:
    wrk.require_wrk()
    return [measure_fleet(fleet, settings, progress) for fleet in settings.fleets]
