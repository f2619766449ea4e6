"""What one sweep costs back to back, and after the pause a poll interval leaves.

    python -m benchmarks.sweep_after_idle [--fleet default] [--sweeps 20] [--gaps 1,3]

The in-process figures (benchmarks/inprocess.py, sweep_floor.py) time sweeps run one after
another, with the interpreter's code and data in the CPU's caches. A running exporter sweeps
once per poll interval and sleeps in between, so each sweep starts cold: on the 2-core VM a sweep
of the default node cost about three times its back-to-back CPU after a 1 to 3 s sleep, and more
than twice when the CPU spun instead (benchmarks/results/overhead-2026-12-04.md). That is why the
overhead runs' CPU per sweep (benchmarks/overhead.py) is several times the in-process figures,
and why what counts against nvitop-exporter, which pays the same, is how much code and data each
wake-up touches, not only how long it runs warm.

The real poller sweeps the simulated node replaying precomputed answers (every call still costs
what it cost on the real H200), pinned to one CPU. Each sweep's process CPU is read around it:
back to back, after sleeping each gap, and after spinning each gap (the CPU busy with a loop that
touches almost no memory: what is left of the cost is caches, not the CPU's idle state).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from benchmarks.precomputed_answers import precomputed_api
from benchmarks.simulated import fleet_spec
from kube_gpu_exporter.exporter.config import CollectionConfig
from kube_gpu_exporter.exporter.nvml.source import NvmlSource
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml

WARM_UP_SWEEPS = 30
BACK_TO_BACK_SWEEPS = 200


@dataclass(frozen=True, slots=True)
class Pause:
    """Sweeps after one kind of pause: CPU ms per sweep, the median of `sweeps`."""

    how: str  # "back to back", "sleeping", "spinning"
    seconds: float
    sweeps: int
    cpu_ms: float


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _cpu_ms(sweep: Callable[[], object]) -> float:
    started = time.process_time()
    sweep()
    return (time.process_time() - started) * 1000


def measure(fleet: str, sweeps: int, gaps: Sequence[float]) -> list[Pause]:
    # One CPU, as a node's exporter is mostly alone on its core between sweeps; put back after.
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    nvml = NvmlSource(precomputed_api(FakeNvml(fleet_spec(fleet))))
    poller = Poller(CollectionConfig(interval_seconds=1.0), lambda _snapshot: None, nvml)
    try:
        for _ in range(WARM_UP_SWEEPS):
            poller.sweep()
        pauses = [
            Pause(
                "back to back",
                0.0,
                BACK_TO_BACK_SWEEPS,
                statistics.median(_cpu_ms(poller.sweep) for _ in range(BACK_TO_BACK_SWEEPS)),
            )
        ]
        for gap in gaps:
            for how, wait in (("sleeping", time.sleep), ("spinning", _spin)):
                spent = []
                for _ in range(sweeps):
                    wait(gap)
                    spent.append(_cpu_ms(poller.sweep))
                pauses.append(Pause(how, gap, sweeps, statistics.median(spent)))
    finally:
        poller.stop()
        os.sched_setaffinity(0, cpus)
    return pauses


def render(fleet: str, pauses: Iterable[Pause]) -> str:
    rows = list(pauses)
    warm = rows[0].cpu_ms or 1e-9
    lines = [
        f"`{fleet}` node, one CPU, precomputed answers: process CPU per sweep (median).",
        "",
        "| before the sweep | sweeps | CPU ms / sweep | times back to back |",
        "|---|---:|---:|---:|",
    ]
    for pause in rows:
        before = pause.how if not pause.seconds else f"{pause.how} {pause.seconds:g} s"
        lines.append(
            f"| {before} | {pause.sweeps} | {pause.cpu_ms:.2f} | {pause.cpu_ms / warm:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sweep_after_idle", description=__doc__
    )
    parser.add_argument("--fleet", default="default")
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--gaps", default="1,3", help="comma-separated pauses, seconds")
    args = parser.parse_args(argv)
    gaps = [float(g) for g in args.gaps.split(",") if g]
    print(render(args.fleet, measure(args.fleet, args.sweeps, gaps)))
    sys.stdout.flush()
    # Device reads blocked in simulated calls must not hold the process open.
    os._exit(0)


if __name__ == "__main__":
    main()
