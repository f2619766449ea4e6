"""Overhead side by side: kube-gpu-exporter and nvitop-exporter on one simulated node, at once.

    python -m benchmarks.overhead [--fleet default] [--polls 1,5] [--window 60] [--output FILE]
    python -m benchmarks.overhead --calibrate [--window 60]
    python -m benchmarks.overhead --burst [--window 60]

Both exporters poll the same simulated node at the same interval, run at the same time pinned to
CPU 0 (the fake kubelet, an HA pair of real Prometheus servers scraping both every 15 s, and this
harness on CPU 1), and are watched over the same window, so a drift in the machine's load lands on
both. The pair are two servers told apart by their external labels, as kube-prometheus-stack's
are, scraping about half an interval apart (the harness picks replica names until Prometheus,
which derives each target's offset from them, puts the two far enough apart). Each poll interval
runs twice:

- `live`: the simulated NVML computes every answer from its workload models, inside each
  exporter's process, as in the rest of `make bench`;
- `precomputed`: it replays remembered answers at the cost of a dictionary lookup
  (benchmarks/precomputed_answers.py), and what its models still spend in the process (learning
  the answers of calls made a few times a minute, the calls that pass through) is read from the
  participant and taken out of its CPU, so what remains is the exporter's own cost.

Either way every call also costs what the same call cost on a real H200
(kube_gpu_exporter/exporter/simulator/call_costs.py): CPU for a getter, 4 ms of it for the energy
counter. The difference between the two is the simulator's share. CPU per sweep is the CPU rate
divided by the sweeps an hour (3600 / interval); it includes everything the process does in that
time (scrapes, background threads), which is what a node pays.

`--burst` measures what a person scraping by hand costs: two identical exporters, both scraped by
the pair, one also sent ten plain GETs a second apart (as `curl` sends them); the CPU of the 60 s
after the burst is set beside the 60 s before it, each as the ratio to the untouched twin, so the
machine's drift cancels.

`--calibrate` checks the cost model against the one real measurement there is: on a node shaped
like that run (one H200 alone, MIG off, idle, a 1 s poll, precomputed answers), the exporter in
nvitop-exporter's scope reading every field every sweep, as it did then, must cost REAL_BEFORE_RATIO
times nvitop-exporter's CPU within CALIBRATION_TOLERANCE; then the same with the slow fields at
their own cadence, to set beside the real 0.41.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.exporter_side import BenchPrometheus, participant_argv
from benchmarks.precomputed_answers import SIMULATOR_CPU_VARIABLE, simulator_cpu_seconds
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
# The targets on the exporter's own cost with the production defaults, everything on: CPU at most
# these times nvitop-exporter's at the same poll (1 s, and the default 5 s), steady RSS within
# RSS_MARGIN_BYTES of it, and a burst of hand-made scrapes changing the next minute's CPU by less
# than BURST_CHANGE_TARGET.
CPU_RATIO_TARGETS = {1.0: 0.6, 5.0: 1.0}
RSS_MARGIN_BYTES = 15 * MB
BURST_CHANGE_TARGET = 0.10
BURST_SCRAPES = 10
# Rounds of the burst, the twins taking turns: one 60 s window per side told apart twins that
# nothing told apart by 23 % on the 2-core VM (benchmarks/results/overhead-2026-12-04.md).
BURST_ROUNDS = 4
# The pair's second server is kept when it scrapes this far into the first's interval (as a
# fraction of it) or further from both ends; replica names are tried until one does.
PAIR_GAP_RANGE = (0.3, 0.7)
PAIR_NAME_TRIES = 6
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
    # Prometheus servers scraping every participant: 2, an HA pair, or 1.
    scrapers: int = 2

    @property
    def scrape_interval_seconds(self) -> float:
        return float(self.scrape_interval.removesuffix("s"))


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
    # How far into the first server's interval the second scraped (None: one server).
    pair_gap_seconds: float | None = None
    # What the simulator's models spent in the participant's process, taken out of its CPU.
    simulator_cpu_seconds_per_hour: float = 0.0

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


@dataclass
class _Running:
    processes: dict[str, subprocess.Popen]
    ports: dict[str, int]
    prometheus: BenchPrometheus
    pair_gap_seconds: float | None
    # Per participant on precomputed answers, where it keeps the simulator's CPU.
    simulator_cpu_files: dict[str, Path]

    def cpu_seconds(self) -> dict[str, float]:
        """Each participant's CPU less what the simulator's models spent in its process
        (precomputed answers only: live answers count the simulator, as they say)."""
        simulator = self.simulator_cpu_seconds()
        return {
            name: cpu_seconds_precise(p.pid) - simulator.get(name, 0.0)
            for name, p in self.processes.items()
        }

    def simulator_cpu_seconds(self) -> dict[str, float]:
        return {
            name: simulator_cpu_seconds(path) for name, path in self.simulator_cpu_files.items()
        }


@contextlib.contextmanager
def _running(
    settings: Settings,
    answers: str,
    poll: float,
    workdir: Path,
    argvs: dict[str, tuple[int, list[str]]],
) -> Iterator[_Running]:
    """The participants (name: its port and command line) running pinned to CPU 0, ready and
    scraped by the run's Prometheus servers, after the warm-up."""
    env = {**os.environ, ANSWERS_VARIABLE: answers}
    tag = f"{answers}-{poll:g}"
    logs = {name: (workdir / f"{name}-{tag}.log").open("wb") for name in argvs}
    ports = {name: port for name, (port, _) in argvs.items()}
    simulator_cpu_files = (
        {name: workdir / f"simulator-cpu-{name}-{tag}" for name in argvs}
        if answers == "precomputed"
        else {}
    )
    processes = {
        name: subprocess.Popen(
            pinned(0, argv),
            cwd=REPO,
            env=(
                {**env, SIMULATOR_CPU_VARIABLE: str(simulator_cpu_files[name])}
                if name in simulator_cpu_files
                else env
            ),
            stdout=logs[name],
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        for name, (_, argv) in argvs.items()
    }
    try:
        for name, port in ports.items():
            wait_ready(port, "/metrics" if name == "nvitop" else "/readyz", timeout=60)
        with scrapers(settings, list(ports.values()), workdir / f"prometheus-{tag}") as (
            prometheus,
            gap,
        ):
            time.sleep(settings.warmup_seconds)
            yield _Running(processes, ports, prometheus, gap, simulator_cpu_files)
    finally:
        for process in processes.values():
            stop(process)
        for log in logs.values():
            log.close()


def _participants(
    names: Sequence[str], settings: Settings, poll: float, kubelet_socket: str
) -> dict[str, tuple[int, list[str]]]:
    """Each participant's port and command line; "NAME#twin" runs as NAME."""
    argvs = {}
    for name in names:
        port = free_port()
        argvs[name] = (port, _argv(name.split("#")[0], settings.fleet, port, kubelet_socket, poll))
    return argvs


def measure(
    settings: Settings, answers: str, poll: float, workdir: Path, kubelet_socket: str
) -> list[Row]:
    participants = settings.participants
    argvs = _participants(participants, settings, poll, kubelet_socket)
    with _running(settings, answers, poll, workdir, argvs) as running:
        starts, simulator_starts = running.cpu_seconds(), running.simulator_cpu_seconds()
        began = time.monotonic()
        rss: dict[str, list[int]] = {name: [] for name in participants}
        while time.monotonic() - began < settings.window_seconds:
            time.sleep(1.0)
            for name, process in running.processes.items():
                rss[name].append(proc_sample(process.pid).rss_bytes)
        ends, simulator_ends = running.cpu_seconds(), running.simulator_cpu_seconds()
        threads = {name: proc_sample(p.pid).threads for name, p in running.processes.items()}
        seconds = time.monotonic() - began
        rows = []
        for name in participants:
            scrape, _ = running.prometheus.scrape_seconds(running.ports[name])
            rows.append(
                Row(
                    answers=answers,
                    poll_seconds=poll,
                    participant=name,
                    cpu_seconds_per_hour=(ends[name] - starts[name]) / seconds * 3600,
                    simulator_cpu_seconds_per_hour=(
                        simulator_ends.get(name, 0.0) - simulator_starts.get(name, 0.0)
                    )
                    / seconds
                    * 3600,
                    steady_rss_bytes=int(statistics.median(rss[name])),
                    threads=threads[name],
                    prometheus_scrape_seconds=scrape,
                    pair_gap_seconds=running.pair_gap_seconds,
                )
            )
        return rows


@dataclass(frozen=True)
class BurstRound:
    """One round: which twin was bursted, and each twin's CPU seconds in the window before the
    burst and in the one after it."""

    bursted: str
    before: dict[str, float]
    after: dict[str, float]

    @property
    def untouched(self) -> str:
        return next(name for name in self.before if name != self.bursted)

    @property
    def change(self) -> float:
        return _ratio_change([self])


@dataclass(frozen=True)
class Burst:
    poll_seconds: float
    rounds: tuple[BurstRound, ...]
    pair_gap_seconds: float | None

    @property
    def change(self) -> float:
        """Over all rounds: the bursted twins' CPU over the untouched ones' after the bursts,
        against the same before them, less one."""
        return _ratio_change(self.rounds)

    @property
    def quiet_spread(self) -> float:
        """How far apart the twins' CPU was in the quiet windows: the largest of the rounds'
        |before ratio - 1|, what one round's change cannot be told from."""
        return max(abs(_twin_ratio(r.before, r) - 1) for r in self.rounds)


def _twin_ratio(spent: dict[str, float], round_: BurstRound) -> float:
    return spent[round_.bursted] / max(spent[round_.untouched], 1e-9)


def _ratio_change(rounds: Sequence[BurstRound]) -> float:
    def pooled(window: str) -> float:
        bursted = sum(getattr(r, window)[r.bursted] for r in rounds)
        untouched = sum(getattr(r, window)[r.untouched] for r in rounds)
        return bursted / max(untouched, 1e-9)

    return pooled("after") / max(pooled("before"), 1e-9) - 1


def burst(
    settings: Settings,
    poll: float | None = None,
    progress: Callable[[str], None] = print,
    rounds: int = BURST_ROUNDS,
) -> Burst:
    """Ten hand-made scrapes a second apart, then normal scraping: the next window's CPU, set
    beside an untouched twin's. The twins take turns being bursted, round after round, so that
    what tells them apart when nothing does (which sweeps in a window read the energy counter or
    the slow fields, on a VM's uneven CPU) evens out over the rounds instead of deciding one."""
    poll = max(CPU_RATIO_TARGETS) if poll is None else poll
    twins = ("ours", "ours#twin")
    with tempfile.TemporaryDirectory(prefix="kge-burst-") as tmp:
        workdir = Path(tmp)
        with fake_kubelet(settings.fleet, workdir, cpu=1) as socket_path:
            progress(f"burst: {settings.fleet}, {poll:g} s poll, precomputed answers")
            argvs = _participants(twins, settings, poll, socket_path)
            with _running(settings, "precomputed", poll, workdir, argvs) as running:
                done: list[BurstRound] = []
                for number in range(rounds):
                    bursted = twins[number % 2]
                    before = _spent_over(running, twins, settings.window_seconds)
                    _scrape_by_hand(running.ports[bursted], BURST_SCRAPES)
                    after = _spent_over(running, twins, settings.window_seconds)
                    done.append(BurstRound(bursted, before, after))
                    progress(f"burst round {number + 1}/{rounds}: {done[-1].change:+.1%}")
                return Burst(poll, tuple(done), running.pair_gap_seconds)


def _spent_over(running: _Running, names: Sequence[str], seconds: float) -> dict[str, float]:
    start = running.cpu_seconds()
    time.sleep(seconds)
    end = running.cpu_seconds()
    return {name: end[name] - start[name] for name in names}


def _scrape_by_hand(port: int, times: int) -> None:
    """GET /metrics `times` times a second apart, each on a new connection, as curl does."""
    for _ in range(times):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            response.read()
        time.sleep(1.0)


def render_burst(result: Burst) -> str:
    met = abs(result.change) < BURST_CHANGE_TARGET
    rounds = ", ".join(f"{r.change:+.1%}" for r in result.rounds)
    return (
        f"- Ten plain GETs a second apart, then the HA pair's scraping, at a "
        f"{result.poll_seconds:g} s poll, in {len(result.rounds)} rounds with the twins taking "
        f"turns: over all rounds, the bursted twin's CPU over its untouched twin's changed by "
        f"{result.change:+.1%} from the window before each burst to the one after it "
        f"({'met' if met else 'not met'}: less than {BURST_CHANGE_TARGET:.0%}); round by round "
        f"{rounds}, where the twins' own spread in the quiet windows was up to "
        f"{result.quiet_spread:.0%}."
    )


@contextlib.contextmanager
def scrapers(
    settings: Settings, ports: Sequence[int], workdir: Path
) -> Iterator[tuple[BenchPrometheus, float | None]]:
    """The run's Prometheus servers scraping `ports`: the first of them, and how far into its
    interval the second scrapes (None with one server)."""
    interval = settings.scrape_interval_seconds
    with contextlib.ExitStack() as stack:

        def server(replica: str | None) -> BenchPrometheus:
            folder = workdir / (replica or "single")
            folder.mkdir(parents=True)
            return stack.enter_context(
                BenchPrometheus(
                    ports, folder, settings.scrape_interval, settings.scrape_timeout, replica
                )
            )

        if settings.scrapers < 2:
            yield server(None), None
            return
        first = server("a")
        first_at = _first_scrape(first, ports[0], interval)
        gap = None
        for attempt in range(PAIR_NAME_TRIES):
            second = server(f"b{attempt}")
            gap = (_first_scrape(second, ports[0], interval) - first_at) % interval
            if PAIR_GAP_RANGE[0] <= gap / interval <= PAIR_GAP_RANGE[1]:
                break
            second.child.stop()
        yield first, gap


def _first_scrape(prometheus: BenchPrometheus, port: int, interval: float) -> float:
    limit = max(3 * interval, 30.0)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        times = prometheus.scrape_times(port)
        if times:
            return times[0]
        time.sleep(0.2)
    raise RuntimeError(f"Prometheus did not scrape 127.0.0.1:{port} within {limit:g} s")


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
    gaps = sorted({f"{r.pair_gap_seconds:.1f}" for r in rows if r.pair_gap_seconds is not None})
    scraped = (
        "an HA pair of real Prometheus servers scraping each every 15 s, the second "
        f"{' / '.join(gaps)} s after the first"
        if gaps
        else "a real Prometheus scraping each every 15 s"
    )
    lines = [
        f"Side by side on the `{fleet}` node, all at once, {scraped}; every simulated NVML call "
        "costs what it cost on a real H200. On precomputed answers, what the simulator's models "
        "still spent in a participant's process (learning the answers of rare calls, the calls "
        "that pass through) is taken out of its CPU (last column).",
        "",
        "| poll | simulated NVML | exporter | CPU s / h | CPU ms / sweep | steady RSS MB | "
        "threads | Prometheus scrape ms | simulator's models, taken out: CPU s / h |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        scrape = r.prometheus_scrape_seconds
        lines.append(
            f"| {r.poll_seconds:g} s | {r.answers} | {NAMES[r.participant]} | "
            f"{r.cpu_seconds_per_hour:.1f} | {r.cpu_ms_per_sweep:.2f} | "
            f"{r.steady_rss_bytes / MB:.1f} | {r.threads} | "
            f"{'-' if scrape is None else f'{scrape * 1000:.1f}'} | "
            f"{r.simulator_cpu_seconds_per_hour:.2f} |"
        )
    return lines


def render(rows: Sequence[Row], fleet: str = "default") -> str:
    lines = [
        *_table(rows, fleet),
        "",
        (
            "Simulator's share (live minus precomputed), and the targets on the exporter's own "
            "cost:"
            if any(r.answers == "live" for r in rows)
            else "The targets on the exporter's own cost:"
        ),
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
            target = CPU_RATIO_TARGETS.get(poll)
            judged = (
                "no target at this poll"
                if target is None
                else f"{'met' if ratio <= target else 'not met'}: at most {target:g}"
            )
            lines.append(
                f"- {poll:g} s poll, targets: CPU {ours.cpu_seconds_per_hour:.1f} against "
                f"{peer.cpu_seconds_per_hour:.1f} s / h, {ratio:.2f} times ({judged}); "
                f"RSS {rss_gap / MB:+.1f} MB against nvitop-exporter "
                f"({'met' if rss_gap <= RSS_MARGIN_BYTES else 'not met'}: within "
                f"{RSS_MARGIN_BYTES / MB:g} MB)."
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
    parser.add_argument(
        "--answers", default=",".join(ANSWERS), help="comma-separated: live, precomputed"
    )
    parser.add_argument("--window", type=float, default=Settings.window_seconds)
    parser.add_argument("--warmup", type=float, default=Settings.warmup_seconds)
    parser.add_argument(
        "--calibrate", action="store_true", help="the cost model against the real H200 run"
    )
    parser.add_argument(
        "--burst", action="store_true", help="what ten hand-made scrapes change afterwards"
    )
    parser.add_argument("--output", help="also write the report to this file")
    args = parser.parse_args(argv)
    fleet_spec(args.fleet)  # a bad fleet fails here, not in a child
    progress: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.calibrate:
        rows = run(calibration_settings(args.window, args.warmup), progress)
        report = render_calibration(rows)
    elif args.burst:
        settings = Settings(
            fleet=args.fleet, window_seconds=args.window, warmup_seconds=args.warmup
        )
        report = render_burst(burst(settings, progress=progress))
    else:
        settings = Settings(
            fleet=args.fleet,
            polls=tuple(float(p) for p in args.polls.split(",")),
            answers=tuple(args.answers.split(",")),
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
