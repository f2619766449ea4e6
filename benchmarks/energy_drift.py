"""How far the exported energy counter strays from the board's own, and how often it is read.

    python -m benchmarks.energy_drift [--polls 5,1] [--minutes 60] [--fixed]

The poller runs alone in this process with the production defaults on the default simulated
node, its clock stepped one poll interval per sweep and a scraper expected every 15 s, for a
simulated hour. After every sweep each GPU's exported counter (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
carried forward by board power between NVML's reads) is set beside the simulated board's true
counter. Per GPU:

- the interval between its last two NVML reads of the counter, and the reads an hour;
- the worst error at any sweep, as a share of the GPU's draw over an hour;
- the worst error of the counter's increase over any 10- and 30-minute window, as a share of
  the true increase (what `increase()` over that window would be off by).

`--fixed` reads the counter at the class interval every time (the rule before the interval
followed the drift), for comparison.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pynvml

from benchmarks.simulated import fleet_spec
from benchmarks.sweep_floor import SCRAPE_PERIOD_SECONDS

WINDOWS_MINUTES = (10, 30)
ENERGY_FIELD_ID = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION


@dataclass(frozen=True)
class GpuDrift:
    index: int
    mean_watts: float
    settled_interval_seconds: float
    reads_per_hour: float
    worst_error_of_hour: float  # share of an hour's draw
    worst_window_error: dict[int, float]  # minutes -> share of the window's true increase


@dataclass(frozen=True)
class _Point:
    at: float
    exported_mj: int
    true_mj: float


def measure(poll_seconds: float, minutes: float, fixed: bool) -> list[GpuDrift]:
    from kube_gpu_exporter.exporter.flags.settings import parse_config
    from kube_gpu_exporter.exporter.nvml import energy_estimate
    from kube_gpu_exporter.exporter.nvml.source import NvmlSource
    from kube_gpu_exporter.exporter.poller import Poller
    from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
    from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock, SteppedHelpers

    clock = ManualClock()
    sim = FakeNvml(fleet_spec("default"), clock=clock.monotonic)
    api = sim.api
    # NVML's reads of the counter, by GPU index: the field-value batches that ask for it.
    read_at: dict[int, list[float]] = {}
    index_of: dict[bytes, int] = {}
    by_index, field_values = api.nvmlDeviceGetHandleByIndex, api.nvmlDeviceGetFieldValues

    def handle_by_index(index: int) -> Any:
        handle = by_index(index)
        index_of[bytes(handle)] = index
        return handle

    def counted_field_values(handle: Any, request: list[Any]) -> Any:
        if ENERGY_FIELD_ID in request:
            read_at.setdefault(index_of[bytes(handle)], []).append(clock.monotonic())
        return field_values(handle, request)

    api.nvmlDeviceGetHandleByIndex = handle_by_index
    api.nvmlDeviceGetFieldValues = counted_field_values
    started = clock.monotonic()

    def next_scrape_in() -> float:
        return SCRAPE_PERIOD_SECONDS - (clock.monotonic() - started) % SCRAPE_PERIOD_SECONDS

    config = replace(parse_config([]).collection, interval_seconds=poll_seconds)
    stretch = energy_estimate.LONGEST_STRETCH
    if fixed:
        energy_estimate.LONGEST_STRETCH = 1.0
    series: dict[int, list[_Point]] = {}
    try:
        poller = Poller(
            config,
            lambda snapshot: None,
            NvmlSource(api),
            runner=SteppedHelpers(),
            next_scrape_in=next_scrape_in,
            clock=clock,
        )
        try:
            for _ in range(round(minutes * 60 / poll_seconds)):
                snapshot = poller.sweep()
                now = clock.monotonic()
                for gpu in snapshot.gpus:
                    exported = gpu.readings.energy_mj if gpu.readings else None
                    if exported is not None:
                        true = float(sim.gpus[gpu.identity.index].energy_mj(now))
                        series.setdefault(gpu.identity.index, []).append(
                            _Point(now, exported, true)
                        )
                clock.advance(poll_seconds)
        finally:
            poller.stop(timeout=2.0)
    finally:
        energy_estimate.LONGEST_STRETCH = stretch
    hours = minutes / 60
    return [
        _figures(index, points, read_at.get(index, []), hours, poll_seconds)
        for index, points in sorted(series.items())
    ]


def _figures(
    index: int, points: list[_Point], reads: list[float], hours: float, poll: float
) -> GpuDrift:
    if any(b.exported_mj < a.exported_mj for a, b in itertools.pairwise(points)):
        raise AssertionError(f"GPU {index}: the exported counter fell")
    interval = reads[-1] - reads[-2] if len(reads) >= 2 else float("nan")
    span_hours = (points[-1].at - points[0].at) / 3600
    hour_draw = (points[-1].true_mj - points[0].true_mj) / span_hours
    worst = max(abs(p.exported_mj - p.true_mj) for p in points) / hour_draw
    windows = {
        m: max(_window_errors(points, round(m * 60 / poll)), default=float("nan"))
        for m in WINDOWS_MINUTES
    }
    return GpuDrift(index, hour_draw / 3.6e6, interval, len(reads) / hours, worst, windows)


def _window_errors(points: list[_Point], steps: int) -> Iterator[float]:
    stride = max(1, steps // 20)
    for start in range(0, len(points) - steps, stride):
        first, last = points[start], points[start + steps]
        true = last.true_mj - first.true_mj
        yield abs((last.exported_mj - first.exported_mj) - true) / true


def render(runs: Iterable[tuple[float, bool, list[GpuDrift]]]) -> str:
    lines = [
        "Default simulated node, production defaults, a scrape every "
        f"{SCRAPE_PERIOD_SECONDS:g} s, a simulated hour per row:",
        "",
        "| poll | reads | GPU | mean W | settled interval s | NVML reads / h | worst error, "
        "share of an hour's draw | worst 10-min increase error | worst 30-min increase error |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for poll, fixed, gpus in runs:
        rule = "class interval" if fixed else "as the drift allows"
        lines += [
            f"| {poll:g} s | {rule} | {g.index} | {g.mean_watts:.0f} | "
            f"{g.settled_interval_seconds:.0f} | {g.reads_per_hour:.0f} | "
            f"{g.worst_error_of_hour:.2%} | {g.worst_window_error[10]:.2%} | "
            f"{g.worst_window_error[30]:.2%} |"
            for g in gpus
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.energy_drift", description=__doc__)
    parser.add_argument("--polls", default="5,1")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--fixed", action="store_true", help="also the fixed class interval")
    args = parser.parse_args(argv)
    runs = []
    for poll in (float(p) for p in args.polls.split(",")):
        for fixed in (True, False) if args.fixed else (False,):
            runs.append((poll, fixed, measure(poll, args.minutes, fixed)))
    print(render(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
