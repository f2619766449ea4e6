"""What a sweep costs beyond its NVML calls: the floor the exporter's own work sits on.

    python -m benchmarks.sweep_floor [--fleets one-h200,default] [--poll 1] [--minutes 2]

The poller runs alone in this process with the production defaults, on the simulated NVML
replaying precomputed answers, its clock stepped one poll interval per sweep and a scraper
expected every 15 s, so the mix of sweeps is production's: the slow fields, the NVLink counters
and the energy counter come before scrapes, the rest every sweep. Each NVML call is timed on its
calling thread's CPU clock. Per sweep:

- the floor: what the calls the sweep made cost on the real H200 (the cost table the simulator
  charges, kube_gpu_exporter/exporter/simulator/call_costs.py), the least any exporter reading
  the same values could spend;
- the exporter's own CPU: the process's CPU over the sweeps less the time spent inside the calls
  (the simulated driver's charge and the replay's lookup), converted to the H200 host's speed by
  the reference workload both hosts timed, as the charges are.

Their ratio is what work on the exporter's side can still take out of a sweep; the rest belongs
to the driver. The table under it says which calls the floor is made of.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.precomputed_answers import precomputed_api
from benchmarks.simulated import fleet_spec

DEFAULT_FLEETS = ("one-h200", "default")
SCRAPE_PERIOD_SECONDS = 15.0
# Sweeps at the start that learn identities, layouts and unsupported answers, and fill the
# replay (four answers per call), left out of the figures.
WARMUP_SWEEPS = 30


@dataclass(frozen=True)
class CallFigures:
    name: str
    calls_per_sweep: float
    real_us_per_call: float

    @property
    def real_us_per_sweep(self) -> float:
        return self.calls_per_sweep * self.real_us_per_call


@dataclass(frozen=True)
class Floor:
    fleet: str
    gpus: int
    poll_seconds: float
    sweeps: int
    floor_us: float  # per sweep, the H200 host's µs
    own_us: float  # per sweep, the H200 host's µs
    calls: tuple[CallFigures, ...]

    @property
    def ratio(self) -> float:
        return self.own_us / max(self.floor_us, 1e-9)


class _CallClock:
    """Wraps an api object's NVML functions: per function, calls, CPU spent inside (every
    thread's own clock) and what the calls cost on the real board."""

    def __init__(self, api: Any, real_cost: Callable[[str, tuple[Any, ...]], float]) -> None:
        self.calls: Counter[str] = Counter()
        self.inside_ns: Counter[str] = Counter()
        self.real_us: dict[str, float] = {}
        self._lock = threading.Lock()
        self._real_cost = real_cost
        for name in dir(api):
            if name.startswith("nvml") and callable(getattr(api, name)):
                setattr(api, name, self._timed(name, getattr(api, name)))

    def _timed(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.thread_time_ns()
            try:
                return call(*args, **kwargs)
            finally:
                spent = time.thread_time_ns() - began
                with self._lock:
                    self.calls[name] += 1
                    self.inside_ns[name] += spent
                    self.real_us[name] = self.real_us.get(name, 0.0) + self._real_cost(name, args)

        return timed

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.inside_ns.clear()
            self.real_us.clear()


class _HelpersOnTheirIntervals:
    """The poller's helpers on the caller's thread, each round when its interval has passed on
    the stepped clock, as their threads would run them; the XID drain is the sweep's own."""

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self._helpers: tuple[Any, ...] = ()
        self._last: dict[int, float] = {}

    def attach(self, helpers: Any) -> None:
        self._helpers = tuple(h for h in helpers if not h.on_sweep)

    def start(self) -> None:
        """Nothing runs on a thread of its own."""

    def run_due(self) -> None:
        now = self._clock.monotonic()
        for helper in self._helpers:
            last = self._last.get(id(helper))
            if last is None or now - last >= helper.interval_seconds:
                helper.run_once()
                self._last[id(helper)] = now


def _real_cost(name: str, args: tuple[Any, ...]) -> float:
    from kube_gpu_exporter.exporter.simulator.call_costs import MEASURED

    return MEASURED.of_call(name, args).cpu_us


def measure(fleet: str, poll_seconds: float, minutes: float) -> Floor:
    from kube_gpu_exporter.exporter.flags.settings import parse_config
    from kube_gpu_exporter.exporter.nvml.source import NvmlSource
    from kube_gpu_exporter.exporter.poller import Poller
    from kube_gpu_exporter.exporter.simulator.call_costs import BURNER
    from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
    from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock

    sim = FakeNvml(fleet_spec(fleet))
    api = precomputed_api(sim)
    clock_of_calls = _CallClock(api, _real_cost)
    clock = ManualClock()
    started = clock.monotonic()

    def next_scrape_in() -> float:
        return SCRAPE_PERIOD_SECONDS - (clock.monotonic() - started) % SCRAPE_PERIOD_SECONDS

    config = parse_config([]).collection
    config = replace(config, interval_seconds=poll_seconds)
    helpers = _HelpersOnTheirIntervals(clock)
    poller = Poller(
        config,
        lambda snapshot: None,
        NvmlSource(api),
        runner=helpers,
        next_scrape_in=next_scrape_in,
        clock=clock,
    )

    def sweep() -> None:
        helpers.run_due()
        poller.sweep()
        clock.advance(poll_seconds)

    try:
        for _ in range(WARMUP_SWEEPS):
            sweep()
        clock_of_calls.reset()
        sweeps = max(1, round(minutes * 60 / poll_seconds))
        cpu_before = time.process_time_ns()
        for _ in range(sweeps):
            sweep()
        cpu_ns = time.process_time_ns() - cpu_before
        gpus = sim.api.nvmlDeviceGetCount()
    finally:
        poller.stop(timeout=2.0)
    own_here_us = (cpu_ns - sum(clock_of_calls.inside_ns.values())) / 1000 / sweeps
    calls = tuple(
        CallFigures(
            name,
            clock_of_calls.calls[name] / sweeps,
            clock_of_calls.real_us[name] / clock_of_calls.calls[name],
        )
        for name in clock_of_calls.calls
    )
    return Floor(
        fleet=fleet,
        gpus=gpus,
        poll_seconds=poll_seconds,
        sweeps=sweeps,
        floor_us=sum(clock_of_calls.real_us.values()) / sweeps,
        own_us=own_here_us / BURNER.host_ratio(),
        calls=tuple(sorted(calls, key=lambda c: -c.real_us_per_sweep)),
    )


def render(floors: Iterable[Floor]) -> str:
    floors = list(floors)
    lines = [
        "Per sweep, in the real H200 host's µs (production defaults, precomputed answers, a "
        f"scrape every {SCRAPE_PERIOD_SECONDS:g} s):",
        "",
        "| node | GPUs | poll | sweeps | NVML calls | floor: the calls on the H200 µs | "
        "exporter's own µs | own ÷ floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in floors:
        calls = sum(c.calls_per_sweep for c in f.calls)
        lines.append(
            f"| `{f.fleet}` | {f.gpus} | {f.poll_seconds:g} s | {f.sweeps} | {calls:.1f} | "
            f"{f.floor_us:.0f} | {f.own_us:.0f} | {f.ratio:.2f} |"
        )
    for f in floors:
        lines += [
            "",
            f"`{f.fleet}` ({f.gpus} GPUs): the floor by call, per sweep",
            "",
            "| NVML call | calls | H200 µs per call | H200 µs |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            f"| `{c.name}` | {c.calls_per_sweep:.2f} | {c.real_us_per_call:.1f} | "
            f"{c.real_us_per_sweep:.1f} |"
            for c in f.calls
            if c.real_us_per_sweep >= 0.05
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_floor", description=__doc__)
    parser.add_argument("--fleets", default=",".join(DEFAULT_FLEETS))
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--minutes", type=float, default=2.0, help="simulated minutes per node")
    args = parser.parse_args(argv)
    fleets = args.fleets.split(",")
    for fleet in fleets:
        fleet_spec(fleet)  # a bad name fails before any measuring
    print(render(measure(fleet, args.poll, args.minutes) for fleet in fleets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
