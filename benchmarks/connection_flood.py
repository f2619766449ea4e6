"""A sustained flood of new connections from one address, and how many scrapes from another
address still succeed meanwhile.

    python -m benchmarks.connection_flood [--attackers 1500] [--scrapes 20] [--timeout 5]

The exporter runs as its own process (`--simulate`) on 127.0.0.1. The flood is a second process
whose attackers connect from 127.0.0.1, send nothing and, whenever the exporter closes them,
connect again at once, so new connections keep arriving for as long as it runs. The scraper
connects from 127.0.0.2 (another loopback address, so another client to the exporter) and asks
for /metrics on a new connection each time, as Prometheus does after its connection was cut.

`flood()` is what tests/process/test_hostile_clients.py uses at a smaller scale.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FLOOD_ADDRESS = "127.0.0.1"
SCRAPER_ADDRESS = "127.0.0.2"
# Time for every attacker to have connected once and for the churn to reach its pace.
RAMP_SECONDS = 2.0
EVICTED = "kube_gpu_exporter_http_connections_evicted_total"


def _raise_open_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _attacker(port: int, made: list[int]) -> None:
    while True:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(FLOOD_ADDRESS, 0)
            )
        except OSError:
            await asyncio.sleep(0.01)  # out of ports or descriptors for a moment
            continue
        made[0] += 1
        try:
            await reader.read()  # nothing comes: this returns when the exporter closes it
        except OSError:
            pass
        finally:
            writer.close()


async def _flood_main(port: int, attackers: int) -> None:
    made = [0]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    tasks = [loop.create_task(_attacker(port, made)) for _ in range(attackers)]
    started = time.monotonic()
    print("flooding", flush=True)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(f"connections {made[0]} seconds {time.monotonic() - started:.3f}", flush=True)


@dataclass
class Flood:
    process: subprocess.Popen[str]
    connections: int = 0
    seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return self.connections / self.seconds if self.seconds else 0.0


@contextlib.contextmanager
def flood(port: int, attackers: int) -> Iterator[Flood]:
    """`attackers` connections from FLOOD_ADDRESS to 127.0.0.1:`port`, each made again as soon
    as it is closed, in a process of their own, from when this is entered until it is left;
    then the Flood holds how many connections were made and over how long."""
    child = subprocess.Popen(
        [
            *(sys.executable, "-m", "benchmarks.connection_flood"),
            *("--flood-child", str(port), str(attackers)),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    running = Flood(child)
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "flooding":
            raise RuntimeError("the flood process did not start")
        yield running
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            out, _ = child.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            out, _ = child.communicate()
        if found := re.search(r"connections (\d+) seconds (\S+)", out or ""):
            running.connections, running.seconds = int(found.group(1)), float(found.group(2))


def _get(connection: http.client.HTTPConnection, path: str) -> str:
    connection.request("GET", path, headers={"Accept-Encoding": "identity"})
    response = connection.getresponse()
    body = response.read().decode()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}")
    return body


def _connection(address: str, port: int, timeout: float) -> http.client.HTTPConnection:
    return http.client.HTTPConnection(
        "127.0.0.1", port, timeout=timeout, source_address=(address, 0)
    )


def scrape_from(address: str, port: int, path: str = "/metrics", timeout: float = 5.0) -> str:
    """The body of one GET on a new connection made from `address`; raises on any failure."""
    connection = _connection(address, port, timeout)
    try:
        return _get(connection, path)
    finally:
        connection.close()


@dataclass(frozen=True, slots=True)
class Scrapes:
    seconds: tuple[float, ...]  # of each successful scrape
    failures: tuple[str, ...]

    @property
    def ok(self) -> int:
        return len(self.seconds)


def timed_scrapes(
    port: int, count: int, timeout: float, *, keep_alive: bool = True, gap: float = 0.25
) -> Scrapes:
    """`count` scrapes from SCRAPER_ADDRESS, one after another, each allowed `timeout`. With
    `keep_alive`, on one connection kept open between scrapes, as Prometheus keeps one per
    target, and not retried when it was closed meanwhile (Go's HTTP client would retry a GET once
    on a new connection; Python's and aiohttp's do not); otherwise each on a new connection."""
    seconds: list[float] = []
    failures: list[str] = []
    connection = _connection(SCRAPER_ADDRESS, port, timeout)
    try:
        for _ in range(count):
            started = time.monotonic()
            try:
                _get(connection, "/metrics")
                seconds.append(time.monotonic() - started)
            except (OSError, RuntimeError, http.client.HTTPException) as exc:
                failures.append(type(exc).__name__)
                connection.close()  # the next request connects again
            if not keep_alive:
                connection.close()
            time.sleep(gap)
    finally:
        connection.close()
    return Scrapes(tuple(seconds), tuple(failures))


def evicted(port: int) -> float:
    body = scrape_from(SCRAPER_ADDRESS, port, timeout=10)
    found = re.search(rf"^{EVICTED} (\S+)$", body, re.M)
    if found is None:
        raise RuntimeError(f"{EVICTED} is missing")
    return float(found.group(1))


@contextlib.contextmanager
def exporter(*flags: str) -> Iterator[int]:
    """The simulated exporter on 127.0.0.1, serving; yields its port."""
    from benchmarks.processes import free_port, stop, wait_ready

    port = free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "kube_gpu_exporter", "--simulate", "--collector.interval=1s"),
            *(f"--web.listen-address=127.0.0.1:{port}", *flags),
        ],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(port)
        yield port
    finally:
        stop(process)


def measure(
    attackers: int, scrapes: int, timeout: float, keep_alive: bool, flags: Sequence[str]
) -> str:
    with exporter(*flags) as port, flood(port, attackers) as running:
        time.sleep(RAMP_SECONDS)
        result = timed_scrapes(port, scrapes, timeout, keep_alive=keep_alive)
        closed = evicted(port)
    times = sorted(result.seconds) or [float("nan")]
    failures = ", ".join(sorted(set(result.failures))) or "none"
    return (
        f"{attackers} attackers on {FLOOD_ADDRESS}: {result.ok}/{scrapes} scrapes from "
        f"{SCRAPER_ADDRESS} ({'one kept-alive connection' if keep_alive else 'new connections'})"
        f" succeeded (timeout {timeout:g} s); median {statistics.median(times):.3f}"
        f" s, max {times[-1]:.3f} s; flood {running.per_second:.0f} connections/s, "
        f"{closed:.0f} evicted; failures: {failures}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.connection_flood")
    parser.add_argument("--attackers", type=int, nargs="+", default=[1000, 1500])
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument(
        "--new-connections",
        action="store_true",
        help="scrape on a new connection each time instead of one kept alive",
    )
    parser.add_argument("--flood-child", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("exporter_flags", nargs="*", help="more flags for the exporter")
    args = parser.parse_args(argv)
    _raise_open_file_limit()
    if args.flood_child:
        port, attackers = args.flood_child
        runner = _uvloop_run()
        runner(_flood_main(port, attackers))
        return 0
    print(f"{os.cpu_count()} CPUs; exporter flags: {' '.join(args.exporter_flags) or 'defaults'}")
    for attackers in args.attackers:
        print(
            measure(
                attackers,
                args.scrapes,
                args.timeout,
                not args.new_connections,
                args.exporter_flags,
            ),
            flush=True,
        )
    return 0


def _uvloop_run():
    # The flood has to outpace the exporter's accept loop, which runs on uvloop too.
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


if __name__ == "__main__":
    sys.exit(main())
