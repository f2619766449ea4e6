"""Overhead side by side: kube-gpu-exporter and nvitop-exporter on one simulated node, at once.

    python -m benchmarks.overhead [--fleet default] [--polls 1,5] [--window 60] [--output FILE]

Both exporters poll the same simulated node at the same interval, run at the same time pinned to
CPU 0 (the fake kubelet, a real Prometheus scraping both every 15 s, and this harness on CPU 1),
and are watched over the same window, so a drift in the machine's load lands on both. Each poll
interval runs twice:

- `live`: the simulated NVML computes every answer from its workload models, inside each
  exporter's process, as in the rest of `make bench`;
- `precomputed`: it replays remembered answers at the cost of a dictionary lookup
  (exporter/simulator/precomputed_answers.py), so what remains is the exporter's own cost.

The difference between the two is the simulator's share. CPU per sweep is the CPU rate divided by
the sweeps an hour (3600 / interval); it includes everything the process does in that time
(scrapes, background threads), which is what a node pays.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.exporter_side import BenchPrometheus, participant_argv
from benchmarks.processes import (
    REPO,
    cpu_seconds_precise,
    fake_kubelet,
    free_port,
    pinned,
    proc_sample,
    stop,
    wait_ready,
)
from benchmarks.simulated import ANSWERS, ANSWERS_VARIABLE, fleet_spec

PARTICIPANTS = ("ours", "ours-core", "nvitop")
NAMES = {
    "ours": "kube-gpu-exporter",
    "ours-core": "kube-gpu-exporter, nvitop-exporter's scope",
    "nvitop": "nvitop-exporter",
}
# What kube-gpu-exporter does that nvitop-exporter does not, turned off: pods (pod-resources),
# GPM profiling metrics, XID events. The rest (the board readings, ECC, clocks, throttling, MIG,
# NVLink and PCIe) stays on, so this is still more than nvitop-exporter exports.
CORE_FLAGS = ("--no-podresources", "--no-collector.gpm", "--no-collector.xid")
MB = 1_000_000
# The targets: CPU at or below nvitop-exporter's, steady RSS within 10 MB of it.
RSS_MARGIN_BYTES = 10 * MB


@dataclass(frozen=True)
class Settings:
    fleet: str = "default"
    polls: tuple[float, ...] = (1.0, 5.0)
    answers: tuple[str, ...] = ANSWERS
    # Long enough for the replay to have learnt every answer (4 per call) at the slowest poll.
    warmup_seconds: float = 25.0
    window_seconds: float = 60.0
    scrape_interval: str = "15s"
    scrape_timeout: str = "10s"


@dataclass(frozen=True)
class Row:
    answers: str
    poll_seconds: float
    participant: str
    cpu_seconds_per_hour: float
    steady_rss_bytes: int
    threads: int
    prometheus_scrape_seconds: float | None

    @property
    def cpu_ms_per_sweep(self) -> float:
        return self.cpu_seconds_per_hour * 1000 / (3600 / self.poll_seconds)


def _argv(name: str, fleet: str, port: int, socket_path: str, poll: float) -> list[str]:
    if name == "nvitop":
        # participant_argv polls at make bench's interval; this run sets its own.
        return [*participant_argv(name, fleet, port, socket_path)[:-1], f"{poll:g}"]
    argv = participant_argv("ours", fleet, port, socket_path)
    argv = [a for a in argv if not a.startswith("--collector.interval=")]
    argv.append(f"--collector.interval={poll:g}s")
    return [*argv, *CORE_FLAGS] if name == "ours-core" else argv


def measure(
    settings: Settings, answers: str, poll: float, workdir: Path, kubelet_socket: str
) -> list[Row]:
    env = {**os.environ, ANSWERS_VARIABLE: answers}
    ports = {name: free_port() for name in PARTICIPANTS}
    logs = {name: (workdir / f"{name}-{answers}-{poll:g}.log").open("wb") for name in PARTICIPANTS}
    processes = {
        name: subprocess.Popen(
            pinned(0, _argv(name, settings.fleet, ports[name], kubelet_socket, poll)),
            cwd=REPO,
            env=env,
            stdout=logs[name],
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        for name in PARTICIPANTS
    }
    try:
        for name, port in ports.items():
            wait_ready(port, "/metrics" if name == "nvitop" else "/readyz", timeout=60)
        prometheus_dir = workdir / f"prometheus-{answers}-{poll:g}"
        prometheus_dir.mkdir()
        with BenchPrometheus(
            list(ports.values()), prometheus_dir, settings.scrape_interval, settings.scrape_timeout
        ) as prometheus:
            time.sleep(settings.warmup_seconds)
            starts = {name: cpu_seconds_precise(p.pid) for name, p in processes.items()}
            began = time.monotonic()
            rss: dict[str, list[int]] = {name: [] for name in PARTICIPANTS}
            while time.monotonic() - began < settings.window_seconds:
                time.sleep(1.0)
                for name, process in processes.items():
                    rss[name].append(proc_sample(process.pid).rss_bytes)
            ends = {name: cpu_seconds_precise(p.pid) for name, p in processes.items()}
            threads = {name: proc_sample(p.pid).threads for name, p in processes.items()}
            seconds = time.monotonic() - began
            rows = []
            for name in PARTICIPANTS:
                scrape, _ = prometheus.scrape_seconds(ports[name])
                rows.append(
                    Row(
                        answers=answers,
                        poll_seconds=poll,
                        participant=name,
                        cpu_seconds_per_hour=(ends[name] - starts[name]) / seconds * 3600,
                        steady_rss_bytes=int(statistics.median(rss[name])),
                        threads=threads[name],
                        prometheus_scrape_seconds=scrape,
                    )
                )
            return rows
    finally:
        for process in processes.values():
            stop(process)
        for log in logs.values():
            log.close()


def run(settings: Settings, progress: Callable[[str], None] = print) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kge-overhead-") as tmp:
        workdir = Path(tmp)
        with fake_kubelet(settings.fleet, workdir, cpu=1) as socket_path:
            for poll in settings.polls:
                for answers in settings.answers:
                    progress(f"overhead: {settings.fleet}, {poll:g} s poll, {answers} answers")
                    rows += measure(settings, answers, poll, workdir, socket_path)
    return rows


def _find(rows: Sequence[Row], answers: str, poll: float, participant: str) -> Row | None:
    return next(
        (
            r
            for r in rows
            if (r.answers, r.poll_seconds, r.participant) == (answers, poll, participant)
        ),
        None,
    )


def render(rows: Sequence[Row], fleet: str = "default") -> str:
    lines = [
        f"Side by side on the `{fleet}` node, both exporters at once, a real Prometheus scraping "
        "each every 15 s.",
        "",
        "| poll | simulated NVML | exporter | CPU s / h | CPU ms / sweep | steady RSS MB | "
        "threads | Prometheus scrape ms |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        scrape = r.prometheus_scrape_seconds
        lines.append(
            f"| {r.poll_seconds:g} s | {r.answers} | {NAMES[r.participant]} | "
            f"{r.cpu_seconds_per_hour:.1f} | {r.cpu_ms_per_sweep:.2f} | "
            f"{r.steady_rss_bytes / MB:.1f} | {r.threads} | "
            f"{'-' if scrape is None else f'{scrape * 1000:.1f}'} |"
        )
    lines += [
        "",
        "Simulator's share (live minus precomputed), and the targets on the exporter's own cost:",
        "",
    ]
    for poll in sorted({r.poll_seconds for r in rows}):
        for name in PARTICIPANTS:
            live, own = _find(rows, "live", poll, name), _find(rows, "precomputed", poll, name)
            if live and own:
                share = live.cpu_ms_per_sweep - own.cpu_ms_per_sweep
                lines.append(
                    f"- {poll:g} s poll, {NAMES[name]}: {live.cpu_ms_per_sweep:.2f} ms per sweep "
                    f"with the simulator, {own.cpu_ms_per_sweep:.2f} without "
                    f"(the simulator's share {share:.2f} ms)."
                )
        ours, peer = (
            _find(rows, "precomputed", poll, "ours"),
            _find(rows, "precomputed", poll, "nvitop"),
        )
        core = _find(rows, "precomputed", poll, "ours-core")
        if core and peer:
            below = core.cpu_seconds_per_hour <= peer.cpu_seconds_per_hour
            lines.append(
                f"- {poll:g} s poll, in nvitop-exporter's scope (no pods, GPM or XIDs): CPU "
                f"{core.cpu_seconds_per_hour:.1f} against {peer.cpu_seconds_per_hour:.1f} s / h "
                f"({'at or below' if below else 'above'})."
            )
        if ours and peer:
            cpu_met = ours.cpu_seconds_per_hour <= peer.cpu_seconds_per_hour
            rss_gap = ours.steady_rss_bytes - peer.steady_rss_bytes
            lines.append(
                f"- {poll:g} s poll, targets: CPU {ours.cpu_seconds_per_hour:.1f} against "
                f"{peer.cpu_seconds_per_hour:.1f} s / h ({'met' if cpu_met else 'not met'}); "
                f"RSS {rss_gap / MB:+.1f} MB against nvitop-exporter "
                f"({'met' if rss_gap <= RSS_MARGIN_BYTES else 'not met'}: within 10 MB)."
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__)
    parser.add_argument("--fleet", default=Settings.fleet)
    parser.add_argument("--polls", default="1,5", help="comma-separated poll intervals, seconds")
    parser.add_argument("--window", type=float, default=Settings.window_seconds)
    parser.add_argument("--warmup", type=float, default=Settings.warmup_seconds)
    parser.add_argument("--output", help="also write the report to this file")
    args = parser.parse_args(argv)
    fleet_spec(args.fleet)  # a bad fleet fails here, not in a child
    settings = Settings(
        fleet=args.fleet,
        polls=tuple(float(p) for p in args.polls.split(",")),
        window_seconds=args.window,
        warmup_seconds=args.warmup,
    )
    report = render(run(settings, lambda m: print(m, file=sys.stderr, flush=True)), args.fleet)
    print(report)
    if args.output:
        Path(args.output).write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
