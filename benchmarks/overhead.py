"""Overhead side by side: kube-gpu-exporter and nvitop-exporter on one simulated node, at once.

    python -m benchmarks.overhead [--fleet default] [--polls 1,5] [--window 60] [--output FILE]
    python -m benchmarks.overhead --calibrate [--window 60]

Both exporters poll the same simulated node at the same interval, run at the same time pinned to
CPU 0 (the fake kubelet, a real Prometheus scraping both every 15 s, and this harness on CPU 1),
and are watched over the same window, so a drift in the machine's load lands on both. Each poll
interval runs twice:

- `live`: the simulated NVML computes every answer from its workload models, inside each
  exporter's process, as in the rest of `make bench`;
- `precomputed`: it replays remembered answers at the cost of a dictionary lookup
  (kube_gpu_exporter/exporter/simulator/precomputed_answers.py), so what remains is the exporter's
  own cost.

Either way every call also costs what the same call cost on a real H200
(kube_gpu_exporter/exporter/simulator/call_costs.py): CPU for a getter, 4 ms of it for the energy
counter. The difference between the two is the simulator's share. CPU per sweep is the CPU rate
divided by the sweeps an hour (3600 / interval); it includes everything the process does in that
time (scrapes, background threads), which is what a node pays.

`--calibrate` checks the cost model against the one real measurement there is: on a node shaped
like that run (one H200 alone, MIG off, idle, a 1 s poll, precomputed answers), the exporter in
nvitop-exporter's scope reading every field every sweep, as it did then, must cost REAL_BEFORE_RATIO
times nvitop-exporter's CPU within CALIBRATION_TOLERANCE; then the same with the slow fields at
their own cadence, to set beside the real 0.41.
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
# Ours in nvitop-exporter's scope reading every field every sweep: the exporter as it ran on the
# real H200, before the slow fields got their own cadence.
BEFORE = "ours-core-every-sweep"
NAMES = {
    "ours": "kube-gpu-exporter",
    "ours-core": "kube-gpu-exporter, nvitop-exporter's scope",
    BEFORE: "kube-gpu-exporter, nvitop-exporter's scope, every field every sweep",
    "nvitop": "nvitop-exporter",
}
# What kube-gpu-exporter does that nvitop-exporter does not, turned off: pods (pod-resources),
# GPM profiling metrics, XID events. The rest (the board readings, ECC, clocks, throttling, MIG,
# NVLink and PCIe) stays on, so this is still more than nvitop-exporter exports.
CORE_FLAGS = ("--no-podresources", "--no-collector.gpm", "--no-collector.xid")
EXTRA_FLAGS = {
    "ours": (),
    "ours-core": CORE_FLAGS,
    BEFORE: (
        *CORE_FLAGS,
        "--collector.field-interval=slow-fields=0s",
        "--collector.field-interval=energy-counter=0s",
    ),
}
MB = 1_000_000
# The targets on the exporter's own cost with the production defaults: CPU at most 0.6 times
# nvitop-exporter's at a 1 s poll, steady RSS within 10 MB of it.
CPU_RATIO_TARGET = 0.6
TARGET_POLL_SECONDS = 1.0
RSS_MARGIN_BYTES = 10 * MB
# The exporter's run on a real NVIDIA H200 (2026-11-26, driver 580.159.04, idle, 1 s poll, both
# exporters at once over 60 and 75 s windows): ours in nvitop-exporter's scope, every field every
# sweep, 27.8 and 28.2 CPU-s/h against nvitop-exporter 1.7.2's 17.3 and 17.4; without the energy
# field 7.2 against 17.4. docs/performance.md, 'Calibration against the real run'.
REAL_BEFORE_RATIO = (27.8 / 17.3 + 28.2 / 17.4) / 2
REAL_AFTER_RATIO = 7.2 / 17.4
CALIBRATION_TOLERANCE = 0.25
CALIBRATION_FLEET = "one-h200"


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
    participants: tuple[str, ...] = PARTICIPANTS


def calibration_settings(window_seconds: float = 60.0, warmup_seconds: float = 25.0) -> Settings:
    return Settings(
        fleet=CALIBRATION_FLEET,
        polls=(1.0,),
        answers=("precomputed",),
        warmup_seconds=warmup_seconds,
        window_seconds=window_seconds,
        participants=(BEFORE, "ours-core", "nvitop"),
    )


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
    return [*argv, *EXTRA_FLAGS[name]]


def measure(
    settings: Settings, answers: str, poll: float, workdir: Path, kubelet_socket: str
) -> list[Row]:
    env = {**os.environ, ANSWERS_VARIABLE: answers}
    participants = settings.participants
    ports = {name: free_port() for name in participants}
    logs = {name: (workdir / f"{name}-{answers}-{poll:g}.log").open("wb") for name in participants}
    processes = {
        name: subprocess.Popen(
            pinned(0, _argv(name, settings.fleet, ports[name], kubelet_socket, poll)),
            cwd=REPO,
            env=env,
            stdout=logs[name],
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        for name in participants
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
            rss: dict[str, list[int]] = {name: [] for name in participants}
            while time.monotonic() - began < settings.window_seconds:
                time.sleep(1.0)
                for name, process in processes.items():
                    rss[name].append(proc_sample(process.pid).rss_bytes)
            ends = {name: cpu_seconds_precise(p.pid) for name, p in processes.items()}
            threads = {name: proc_sample(p.pid).threads for name, p in processes.items()}
            seconds = time.monotonic() - began
            rows = []
            for name in participants:
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


def _table(rows: Sequence[Row], fleet: str) -> list[str]:
    lines = [
        f"Side by side on the `{fleet}` node, all at once, a real Prometheus scraping each every "
        "15 s; every simulated NVML call costs what it cost on a real H200.",
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
    return lines


def render(rows: Sequence[Row], fleet: str = "default") -> str:
    lines = [
        *_table(rows, fleet),
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
            lines.append(
                f"- {poll:g} s poll, in nvitop-exporter's scope (no pods, GPM or XIDs): CPU "
                f"{core.cpu_seconds_per_hour:.1f} against {peer.cpu_seconds_per_hour:.1f} s / h "
                f"({_ratio(core, peer):.2f} times)."
            )
        if ours and peer:
            ratio = _ratio(ours, peer)
            rss_gap = ours.steady_rss_bytes - peer.steady_rss_bytes
            # The CPU target is set for a 1 s poll; at another poll the ratio is only reported.
            judged = (
                f"{'met' if ratio <= CPU_RATIO_TARGET else 'not met'}: at most "
                f"{CPU_RATIO_TARGET:g} at a 1 s poll"
                if poll == TARGET_POLL_SECONDS
                else f"the target of {CPU_RATIO_TARGET:g} is for a 1 s poll"
            )
            lines.append(
                f"- {poll:g} s poll, targets: CPU {ours.cpu_seconds_per_hour:.1f} against "
                f"{peer.cpu_seconds_per_hour:.1f} s / h, {ratio:.2f} times ({judged}); "
                f"RSS {rss_gap / MB:+.1f} MB against nvitop-exporter "
                f"({'met' if rss_gap <= RSS_MARGIN_BYTES else 'not met'}: within 10 MB)."
            )
    return "\n".join(lines)


def _ratio(ours: Row, peer: Row) -> float:
    return ours.cpu_seconds_per_hour / max(peer.cpu_seconds_per_hour, 1e-9)


@dataclass(frozen=True)
class Calibration:
    before_ratio: float
    after_ratio: float

    @property
    def reproduced(self) -> bool:
        return abs(self.before_ratio / REAL_BEFORE_RATIO - 1) <= CALIBRATION_TOLERANCE


def calibration(rows: Sequence[Row]) -> Calibration | None:
    before, after, peer = (
        _find(rows, "precomputed", 1.0, name) for name in (BEFORE, "ours-core", "nvitop")
    )
    if before is None or after is None or peer is None:
        return None
    return Calibration(_ratio(before, peer), _ratio(after, peer))


def render_calibration(rows: Sequence[Row]) -> str:
    lines = _table(rows, CALIBRATION_FLEET)
    result = calibration(rows)
    if result is not None:
        low, high = (REAL_BEFORE_RATIO * (1 + k * CALIBRATION_TOLERANCE) for k in (-1, 1))
        lines += [
            "",
            f"- Before the fix (every field every sweep, nvitop-exporter's scope): "
            f"{result.before_ratio:.2f} times nvitop-exporter's CPU, against "
            f"{REAL_BEFORE_RATIO:.2f} on the real H200: "
            f"{'reproduced' if result.reproduced else 'NOT reproduced'} "
            f"(within ±{CALIBRATION_TOLERANCE:.0%}: {low:.2f} to {high:.2f}).",
            f"- After it (slow fields at their own cadence): {result.after_ratio:.2f} times, "
            f"against {REAL_AFTER_RATIO:.2f} measured on the real H200 with the energy field "
            "left out.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__)
    parser.add_argument("--fleet", default=Settings.fleet)
    parser.add_argument("--polls", default="1,5", help="comma-separated poll intervals, seconds")
    parser.add_argument("--window", type=float, default=Settings.window_seconds)
    parser.add_argument("--warmup", type=float, default=Settings.warmup_seconds)
    parser.add_argument(
        "--calibrate", action="store_true", help="the cost model against the real H200 run"
    )
    parser.add_argument("--output", help="also write the report to this file")
    args = parser.parse_args(argv)
    fleet_spec(args.fleet)  # a bad fleet fails here, not in a child
    progress: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.calibrate:
        rows = run(calibration_settings(args.window, args.warmup), progress)
        report = render_calibration(rows)
    else:
        settings = Settings(
            fleet=args.fleet,
            polls=tuple(float(p) for p in args.polls.split(",")),
            window_seconds=args.window,
            warmup_seconds=args.warmup,
        )
        report = render(run(settings, progress), args.fleet)
    print(report)
    if args.output:
        Path(args.output).write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
