"""Soak: many sweeps at an accelerated interval under concurrent scrapes and injected faults.

The exporter runs in its own process on the simulated default node, so its RSS, threads and file
descriptors are read from /proc/PID without the harness's own allocations mixed in. The command
line refuses intervals under 0.1 s (100,000 sweeps would take three hours), so the child is the
exporter's own `serve_node` with the interval replaced after the usual flag parsing; it adds one
route, /-/soak, with the poller's sweep sequence number and the event loop's task count, which the
exporter does not export itself.

Meanwhile K scrapers fetch /metrics over real HTTP (half keep their connection, half open one per
scrape; gzip and plain alternate) and a fault thread injects XIDs and ECC errors, loses, restores
and resets GPUs, unloads the driver and stops the kubelet, so reconnect paths run throughout.

Baseline after a warm-up (by default the larger of 5% of the sweeps and 2,000), so caches, the
allocator's arenas and lazily started helper threads are part of it. Prints a markdown table and
exits 1 if RSS grew by 5 MB or more, if threads, fds or tasks ended above their warm-up level plus
a tolerance, or if any scrape or fault call failed.

    python -m benchmarks.soak [--sweeps 100000] [--scrapers 4] [--interval 0.005] [--output F]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import http.client
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.processes import REPO, free_port, proc_sample, wait_ready

CHILD = "_exporter"  # first argument that turns `python -m benchmarks.soak` into the exporter
STATS_PATH = "/-/soak"
# Set to a frame count, the child traces allocations and serves /-/soak/tracemalloc.
TRACEMALLOC_ENV = "SOAK_TRACEMALLOC"
MB = 1024 * 1024
RSS_LIMIT_BYTES = 5 * MB
# Threads come and go legitimately: gRPC starts pollers per channel and asyncio.to_thread (used by
# the kubelet stop/start control calls) grows its pool on demand. Two extra is noise; a per-cycle
# leak over the run is hundreds.
THREAD_TOLERANCE = 2
# Every scraper holds at most one connection, and a reconnecting one may be caught between close
# and accept; the floor over the sampling window removes most of that, the tolerance the rest.
FD_TOLERANCE = 2
TASK_TOLERANCE = 2  # aiohttp runs one task per open connection: same reasoning as fds
# Bounded set of XID codes: each distinct code adds a series per GPU (growth by design, not a
# leak), so random codes from 1-999 would grow the exposition for the whole run.
XIDS = (13, 31, 43, 48, 63, 74, 79, 94, 95)


# The child: the exporter with an accelerated interval


def serve_accelerated(argv: Sequence[str]) -> int:
    """`_exporter INTERVAL FLAG...`: the exporter on its simulated node, sweeping every INTERVAL
    seconds, plus the /-/soak stats route."""
    from aiohttp import web

    from kube_gpu_exporter.exporter.app import serve_node
    from kube_gpu_exporter.exporter.flags.settings import parse_config
    from kube_gpu_exporter.exporter.logs import configure_logging
    from kube_gpu_exporter.exporter.server import STORE_KEY
    from kube_gpu_exporter.exporter.simulator.control import add_control_routes
    from kube_gpu_exporter.exporter.simulator.node import simulated_fleet, simulated_node

    interval, flags = float(argv[0]), list(argv[1:])
    config = parse_config([*flags, "--simulate"] if "--simulate" not in flags else flags)
    config = replace(
        config,
        collection=replace(config.collection, interval_seconds=interval),
        # Stale after 3 intervals would flag every scrape that lands during a GC pause.
        web=replace(config.web, stale_after_seconds=max(1.0, 3 * interval)),
    )
    configure_logging(config.log_level, config.log_format)

    if os.environ.get(TRACEMALLOC_ENV):
        tracemalloc.start(int(os.environ[TRACEMALLOC_ENV]))
    baseline: list[tracemalloc.Snapshot] = []

    async def allocations(request: web.Request) -> web.Response:
        """Diagnosis of growth: the first call takes a baseline, later ones answer the biggest
        increases since, by source line and by full traceback."""
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        if not baseline:
            baseline.append(snapshot)
            return web.Response(text="baseline taken\n")
        lines = [str(s) for s in snapshot.compare_to(baseline[0], "lineno")[:25]]
        for stat in snapshot.compare_to(baseline[0], "traceback")[:5]:
            lines += ["", str(stat), *stat.traceback.format()]
        return web.Response(text="\n".join(lines) + "\n")

    async def stats(request: web.Request) -> web.Response:
        snapshot = request.app[STORE_KEY].latest
        return web.json_response(
            {
                "sweeps": snapshot.sequence if snapshot else 0,
                "tasks": len(asyncio.all_tasks()),
                "threads": threading.active_count(),
            }
        )

    # Flat, free calls: the soak looks for leaks under faults, and charging each call's CPU (an
    # OpenSSL call on whichever worker thread makes it, call_costs.py) spreads native allocations
    # over more of glibc's per-thread malloc arenas, a bounded one-time growth of a few MB that
    # its RSS limit cannot tell from a leak (with MALLOC_ARENA_MAX=2 it does not happen).
    fleet = replace(simulated_fleet(config), call_costs="flat", call_latency_us=0.0)
    with simulated_node(config, fleet) as node:
        nvml, kubelet = node.nvml, node.kubelet

        def routes(app: web.Application) -> None:
            add_control_routes(app, nvml=nvml, kubelet=kubelet)
            app.router.add_get(STATS_PATH, stats)
            if tracemalloc.is_tracing():
                app.router.add_get(STATS_PATH + "/tracemalloc", allocations)

        serve_node(replace(node.backend, extra_routes=routes))
    return 0


# The harness


@dataclass
class Sample:
    at: float
    sweeps: int
    rss: int
    threads: int
    fds: int
    tasks: int


@dataclass
class Tally:
    scrapes: int = 0
    failed: int = 0
    faults: int = 0
    faults_failed: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, what: str, kind: str = "failed") -> None:
        with self.lock:
            setattr(self, kind, getattr(self, kind) + 1)
            if len(self.errors) < 10:
                self.errors.append(what)


def fetch_json(url: str, method: str = "GET") -> object:
    request = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def scrape(port: int, use_gzip: bool, conn: http.client.HTTPConnection | None) -> str | None:
    """One /metrics scrape; None if it is a complete, well-formed exposition, else what is wrong."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"} if use_gzip else {})
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            return f"status {response.status}: {body[:200]!r}"
        if use_gzip != (response.getheader("Content-Encoding") == "gzip"):
            return f"Content-Encoding {response.getheader('Content-Encoding')!r}, gzip={use_gzip}"
        text = gzip.decompress(body) if use_gzip else body
        if not text.endswith(b"\n") or b"\nkube_gpu_exporter_build_info{" not in text:
            return f"truncated or malformed body ({len(text)} bytes)"
        return None
    except (OSError, http.client.HTTPException, EOFError) as exc:
        if not own:
            conn.close()  # http.client reconnects on the next request
        return f"{type(exc).__name__}: {exc}"
    finally:
        if own:
            conn.close()


def scraper(port: int, number: int, pause: float, stop: threading.Event, tally: Tally) -> None:
    # Even scrapers keep one connection, as Prometheus does; odd ones open one per scrape, so
    # accept and close paths (and their fds and tasks) run constantly too.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10) if number % 2 == 0 else None
    use_gzip = number % 4 < 2
    while not stop.is_set():
        problem = scrape(port, use_gzip, conn)
        with tally.lock:
            tally.scrapes += 1
        if problem:
            tally.fail(f"scraper {number}: {problem}")
        use_gzip = not use_gzip
        stop.wait(pause)
    if conn is not None:
        conn.close()


def fault_cycle(base: str, rng: random.Random, pause: float, tally: Tally) -> None:
    """One round of every fault kind, each undone before the round ends, so the exporter is in
    the same state after every round."""
    gpu = rng.randrange(8)
    steps = [
        *(f"gpus/{rng.randrange(8)}/xid" for _ in range(3)),
        f"gpus/{rng.randrange(8)}/ecc",
        f"gpus/{gpu}/lose",
        f"gpus/{gpu}/restore",
        f"gpus/{rng.randrange(8)}/reset",
        "driver/unload",
        "driver/load",
        "kubelet/stop",
        "kubelet/start",
    ]
    for step in steps:
        url = f"{base}/-/simulator/{step}"
        body = json.dumps({"xid": rng.choice(XIDS)}).encode() if step.endswith("/xid") else b""
        request = urllib.request.Request(url, data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
            with tally.lock:
                tally.faults += 1
        except OSError as exc:
            tally.fail(f"fault {step}: {exc}", "faults_failed")
        time.sleep(pause)


def sample(pid: int, base: str) -> Sample:
    stats = fetch_json(base + STATS_PATH)
    assert isinstance(stats, dict)
    proc = proc_sample(pid)
    rss, threads, fds = proc.rss_bytes, proc.threads, proc.fds
    return Sample(time.monotonic(), stats["sweeps"], rss, threads, fds, stats["tasks"])


def floor(pid: int, base: str, seconds: float = 1.0) -> Sample:
    """Lowest threads, fds and tasks over a short window, with the last RSS: the transient
    connections of the scrapers come and go, a leak raises the floor."""
    samples: list[Sample] = []
    deadline = time.monotonic() + seconds
    while not samples or time.monotonic() < deadline:
        samples.append(sample(pid, base))
        time.sleep(0.05)
    last = samples[-1]
    return replace(
        last,
        threads=min(s.threads for s in samples),
        fds=min(s.fds for s in samples),
        tasks=min(s.tasks for s in samples),
    )


@dataclass
class Result:
    sweeps: int
    seconds: float
    warmup_sweeps: int
    interval: float
    scrapers: int
    tally: Tally
    warm: Sample
    end: Sample
    rss_max: int
    threads_max: int
    fds_max: int
    fault_cycles: int
    rss_limit: int = RSS_LIMIT_BYTES

    @property
    def rss_growth(self) -> int:
        return self.end.rss - self.warm.rss

    def problems(self) -> list[str]:
        found = []
        if self.rss_growth >= self.rss_limit:
            found.append(f"RSS grew {self.rss_growth / MB:.2f} MB (limit {self.rss_limit / MB:g})")
        for name, tolerance in (
            ("threads", THREAD_TOLERANCE),
            ("fds", FD_TOLERANCE),
            ("tasks", TASK_TOLERANCE),
        ):
            before, after = getattr(self.warm, name), getattr(self.end, name)
            if after > before + tolerance:
                found.append(f"{name} went from {before} to {after} (tolerance {tolerance})")
        if self.tally.failed:
            found.append(f"{self.tally.failed} scrapes failed")
        if self.tally.faults_failed:
            found.append(f"{self.tally.faults_failed} fault-injection calls failed")
        return found


def soak(
    sweeps: int,
    scrapers: int = 4,
    interval: float = 0.005,
    warmup: int | None = None,
    scrape_pause: float = 0.05,
    fault_pause: float = 0.2,
    timeout: float | None = None,
    rss_limit: int = RSS_LIMIT_BYTES,
    progress: bool = False,
) -> Result:
    """Run the soak and return its figures; raises RuntimeError if the exporter dies or stalls."""
    warmup = max(2000, sweeps // 20) if warmup is None else warmup
    if not 0 <= warmup < sweeps:
        raise ValueError(f"warm-up ({warmup}) must be below the sweep count ({sweeps})")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="soak-exporter-", suffix=".log", delete=False)  # noqa: SIM115
    argv = [sys.executable, "-m", "benchmarks.soak", CHILD, str(interval)]
    flags = [
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
        # The shortest the flags allow, so MIG re-reads and PCIe sampling run often too.
        "--collector.mig-refresh-interval=1s",
        "--collector.field-interval=pcie-sampler=1s",
    ]
    # stderr to a file, not a pipe: a lost GPU logs every sweep and would fill a pipe nobody reads.
    # The image's malloc setting (Dockerfile), so the soak measures what a node runs.
    env = {**os.environ, "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2")}
    child = subprocess.Popen([*argv, *flags], cwd=REPO, stdout=log, stderr=log, env=env)
    stop = threading.Event()
    tally = Tally()
    threads: list[threading.Thread] = []
    cycles = 0
    try:
        wait_ready(port)
        for number in range(scrapers):
            thread = threading.Thread(
                target=scraper, args=(port, number, scrape_pause, stop, tally), daemon=True
            )
            thread.start()
            threads.append(thread)
        started = time.monotonic()
        deadline = started + (timeout if timeout is not None else 3600 * 6)
        rng = random.Random(8)
        rss_max = threads_max = fds_max = 0
        warm: Sample | None = None
        end: Sample | None = None
        while end is None:
            if child.poll() is not None:
                raise RuntimeError(f"the exporter exited with {child.returncode}; see {log.name}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out; see {log.name}")
            fault_cycle(base, rng, fault_pause, tally)
            cycles += 1
            # Every fault is undone at the end of a cycle: compare states only here.
            now = floor(child.pid, base)
            rss_max = max(rss_max, now.rss)
            threads_max = max(threads_max, now.threads)
            fds_max = max(fds_max, now.fds)
            if warm is None and now.sweeps >= warmup:
                warm = now
            elif warm is not None and now.sweeps >= sweeps:
                end = now
            if progress:
                print(
                    f"  {now.sweeps:>7} sweeps  {now.rss / MB:6.1f} MB  {now.threads} threads  "
                    f"{now.fds} fds  {now.tasks} tasks  {tally.scrapes} scrapes",
                    file=sys.stderr,
                    flush=True,
                )
        assert warm is not None
        return Result(
            sweeps=end.sweeps,
            seconds=end.at - started,
            warmup_sweeps=warm.sweeps,
            interval=interval,
            scrapers=scrapers,
            tally=tally,
            warm=warm,
            end=end,
            rss_max=rss_max,
            threads_max=threads_max,
            fds_max=fds_max,
            fault_cycles=cycles,
            rss_limit=rss_limit,
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        log.close()


def table(result: Result) -> str:
    w, e, t = result.warm, result.end, result.tally
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    rate = (e.sweeps - w.sweeps) / (e.at - w.at) if e.at > w.at else float("nan")
    lines = [
        f"Soak, default simulated node (8x H100, 2 MIG-partitioned), {now}, "
        f"{platform.python_implementation()} {platform.python_version()} on {os.cpu_count()} "
        f"CPUs: {result.sweeps:,} sweeps at a {result.interval * 1e3:g} ms interval in "
        f"{result.seconds:,.0f} s ({result.sweeps / result.seconds:.1f} sweeps/s overall, "
        f"{rate:.1f}/s after warm-up), {result.scrapers} concurrent scrapers, "
        f"{result.fault_cycles} fault cycles.",
        "",
        f"Scrapes: {t.scrapes:,} done, {t.failed} failed. Fault-injection calls: {t.faults:,} "
        f"done, {t.faults_failed} failed.",
        "",
        f"| | warm-up ({result.warmup_sweeps:,} sweeps) | end | change | max | limit |",
        "|---|---:|---:|---:|---:|---:|",
        f"| RSS MB | {w.rss / MB:.2f} | {e.rss / MB:.2f} | {result.rss_growth / MB:+.2f} | "
        f"{result.rss_max / MB:.2f} | < +{result.rss_limit / MB:g} |",
        f"| threads | {w.threads} | {e.threads} | {e.threads - w.threads:+d} | "
        f"{result.threads_max} | +{THREAD_TOLERANCE} |",
        f"| open fds | {w.fds} | {e.fds} | {e.fds - w.fds:+d} | {result.fds_max} | "
        f"+{FD_TOLERANCE} |",
        f"| asyncio tasks | {w.tasks} | {e.tasks} | {e.tasks - w.tasks:+d} | | +{TASK_TOLERANCE} |",
        "",
    ]
    problems = result.problems()
    lines.append("Result: " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
    lines.extend(f"- {error}" for error in t.errors)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [CHILD]:
        return serve_accelerated(argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sweeps", type=int, default=100_000, help="sweeps to run")
    parser.add_argument("--scrapers", type=int, default=4, help="concurrent scrape clients")
    parser.add_argument(
        "--interval", type=float, default=0.005, help="collection interval in seconds"
    )
    parser.add_argument("--warmup", type=int, help="sweeps before the baseline")
    parser.add_argument("--scrape-pause", type=float, default=0.05, help="per-scraper pause, s")
    parser.add_argument("--output", help="also write the table to this file")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = soak(
        args.sweeps,
        scrapers=args.scrapers,
        interval=args.interval,
        warmup=args.warmup,
        scrape_pause=args.scrape_pause,
        progress=not args.quiet,
    )
    text = table(result) + f"\nWall time: {time.monotonic() - started:,.0f} s\n"
    print(text)
    if args.output:
        Path(args.output).write_text(text)
    return 1 if result.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
