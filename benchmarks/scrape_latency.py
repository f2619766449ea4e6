"""Scrape latency and render cost of the exporter on the simulated default node.

Runs the real exporter process (`kube-gpu-exporter --simulate`) pinned to CPU 0 and drives it with
wrk pinned to CPU 1, as in ../shared/reference/performance-facts.md section 2. Prints a markdown
table; `--output FILE` also writes it to a file.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from exporter.config import CollectionConfig, LabelConfig
from exporter.exposition.renderer import Renderer
from exporter.exposition.store import build_exposition
from exporter.poller import Poller
from exporter.simulator.fake_nvml import FakeNvml
from exporter.simulator.fleet import default_fleet

REPO = Path(__file__).resolve().parent.parent
_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(cpu: int, argv: list[str]) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", str(cpu), *argv]
    return argv


def render_cost(repeat: int = 7) -> dict[str, float]:
    """Median render time per snapshot, and the body sizes, for the default fleet."""
    with FakeNvml(default_fleet()):
        poller = Poller(CollectionConfig(pcie_enabled=False, xid_enabled=False), lambda s: None)
        snapshot = poller.sweep()
        poller.stop()
        renderer = Renderer(LabelConfig(node_name="bench-node"))
        number = 50
        times = timeit.repeat(
            lambda: build_exposition(snapshot, renderer), number=number, repeat=repeat
        )
        body_only = timeit.repeat(
            lambda: renderer.render_body(snapshot), number=number, repeat=repeat
        )
        exposition = build_exposition(snapshot, renderer)
        tail = exposition.tail(15.0)
        series = sum(
            1 for line in exposition.plain(tail).splitlines() if line and not line.startswith(b"#")
        )
        gz_tail = timeit.repeat(
            lambda: exposition.gzipped(exposition.tail(15.0)), number=1000, repeat=repeat
        )
        return {
            "render_ms": statistics.median(body_only) / number * 1e3,
            "render_gzip_ms": statistics.median(times) / number * 1e3,
            "per_scrape_tail_us": statistics.median(gz_tail) / 1000 * 1e6,
            "bytes": len(exposition.plain(tail)),
            "gzip_bytes": len(exposition.gzipped(tail)),
            "series": series,
            "body": exposition.plain(tail),
        }


def parse_wrk(output: str) -> dict[str, float]:
    result: dict[str, float] = {}
    for pct, value, unit in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$", output, re.M):
        result[f"p{pct}_ms"] = float(value) * _UNIT[unit]
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    result["rps"] = float(match.group(1)) if match else float("nan")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    result["errors"] = float(errors.group(1)) if errors else 0.0
    return result


def wait_ready(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server on port {port} did not become ready")


def wrk(url: str, clients: int, gzip: bool, duration: int) -> dict[str, float]:
    header = ["-H", "Accept-Encoding: gzip"] if gzip else []
    proc = subprocess.run(
        pinned(1, ["wrk", "-t1", f"-c{clients}", f"-d{duration}s", "--latency", *header, url]),
        capture_output=True,
        text=True,
        check=True,
    )
    return parse_wrk(proc.stdout)


def measure(server_argv: list[str], port: int, duration: int, runs: int, before=None) -> list[dict]:
    """Median of `runs` wrk runs for each (clients, gzip) combination, runs interleaved."""
    server = subprocess.Popen(pinned(0, server_argv), cwd=REPO)
    try:
        wait_ready(port)
        if before is not None:
            before()
        url = f"http://127.0.0.1:{port}/metrics"
        combos = [(c, g) for g in (False, True) for c in (1, 16)]
        results: dict[tuple[int, bool], list[dict[str, float]]] = {k: [] for k in combos}
        for _ in range(runs):
            for clients, gzip in combos:
                results[(clients, gzip)].append(wrk(url, clients, gzip, duration))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    rows = []
    for (clients, gzip), samples in results.items():
        row: dict = {"clients": clients, "gzip": gzip}
        for key in ("p50_ms", "p90_ms", "p99_ms", "rps", "errors"):
            row[key] = statistics.median(s[key] for s in samples)
        row["p99_range"] = (min(s["p99_ms"] for s in samples), max(s["p99_ms"] for s in samples))
        rows.append(row)
    return rows


def scrape_latency(duration: int, runs: int, body_file: Path) -> tuple[list[dict], list[dict]]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "exporter",
        "--simulate",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]

    def serve_floor_the_same_bytes() -> None:
        # The floor must send what the exporter sends (pod labels and all), or the comparison
        # measures body size instead of serving cost.
        time.sleep(6)  # one collection interval: pod attribution is in the body by now
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body_file.write_bytes(response.read())

    exporter = measure(argv, port, duration, runs, before=serve_floor_the_same_bytes)
    port = free_port()
    floor = measure(
        [sys.executable, "-m", "benchmarks.static_server", f"--port={port}", f"--body={body_file}"],
        port,
        duration,
        runs,
    )
    return exporter, floor


def table(
    render: dict[str, float], rows: list[dict], floor: list[dict], runs: int, served_bytes: int
) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Scrape benchmark, default simulated node (8x H100, 2 MIG-partitioned GPUs), {now}, "
        f"{platform.python_implementation()} {platform.python_version()} on "
        f"{os.cpu_count()} CPUs ({platform.machine()}); server on CPU 0, wrk on CPU 1; "
        f"medians of {runs} runs.",
        "",
        f"Exposition without pod attribution: {render['series']} series, "
        f"{render['bytes']:,} bytes ({render['gzip_bytes']:,} gzipped); the served one, with "
        f"pod attribution from the fake kubelet, is {served_bytes:,} bytes.",
        f"Render per snapshot: {render['render_ms']:.2f} ms text, "
        f"{render['render_gzip_ms']:.2f} ms text + gzip; per-scrape tail with gzip: "
        f"{render['per_scrape_tail_us']:.0f} us.",
        "",
        "| server | clients | gzip | p50 ms | p90 ms | p99 ms (min-max) | req/s | errors |",
        "|---|---:|:---:|---:|---:|---:|---:|---:|",
    ]
    for name, source in (("exporter", rows), ("floor: aiohttp, static bytes", floor)):
        for row in source:
            low, high = row["p99_range"]
            lines.append(
                f"| {name} | {row['clients']} | {'yes' if row['gzip'] else 'no'} | "
                f"{row['p50_ms']:.3f} | {row['p90_ms']:.3f} | {row['p99_ms']:.3f} "
                f"({low:.2f}-{high:.2f}) | {row['rps']:,.0f} | {row['errors']:.0f} |"
            )
    lines.append("")
    for ours, base in zip(rows, floor, strict=True):
        lines.append(
            f"- {ours['clients']} client(s), gzip {'on' if ours['gzip'] else 'off'}: exporter p99 "
            f"is {ours['p99_ms'] / base['p99_ms']:.2f}x the floor's, throughput "
            f"{ours['rps'] / base['rps']:.2f}x."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--runs", type=int, default=3, help="wrk runs per configuration")
    parser.add_argument("--output", help="also write the table to this file")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("benchmarks need wrk: `make bench` installs it (Debian package wrk)")
    render = render_cost()
    body_file = Path(tempfile.mkdtemp()) / "metrics.txt"
    body_file.write_bytes(render.pop("body"))  # type: ignore[arg-type]
    rows, floor = scrape_latency(args.duration, args.runs, body_file)
    result = table(render, rows, floor, args.runs, body_file.stat().st_size)
    print(result)
    if args.output:
        Path(args.output).write_text(result)


if __name__ == "__main__":
    main()
