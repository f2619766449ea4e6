"""Runs one benchmark participant on a simulated GPU node, in its own process.

    python -m benchmarks.simulated FLEET kubelet SOCKET
    python -m benchmarks.simulated FLEET ours [exporter flags...]
    python -m benchmarks.simulated FLEET baseline PORT SOCKET INTERVAL
    python -m benchmarks.simulated FLEET nvitop PORT INTERVAL

FLEET is a fleet file or `default`. Every exporter gets the same simulated NVML (FakeNvml
installed into pynvml before the exporter imports anything), and the fake kubelet runs in a process
of its own, as the real kubelet does, so an exporter's CPU and memory are its own.

With BENCH_NVML_ANSWERS=precomputed in the environment, the simulated NVML replays remembered
answers instead of computing them (exporter/simulator/precomputed_answers.py): what the
participant then spends is its own cost, with the simulator's share removed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from exporter.simulator.fake_nvml import FakeNvml
from exporter.simulator.fleet import FleetSpec, default_fleet, load_fleet

FLEETS_DIR = Path(__file__).resolve().parent / "fleets"
ANSWERS_VARIABLE = "BENCH_NVML_ANSWERS"
ANSWERS = ("live", "precomputed")


def fleet_spec(name: str) -> FleetSpec:
    """`default`, a file in benchmarks/fleets/ by its stem, or a path."""
    if name == "default":
        return default_fleet()
    path = FLEETS_DIR / f"{name}.yaml"
    return load_fleet(path if path.exists() else name)


def simulated_nvml(fleet: FleetSpec) -> FakeNvml:
    """The participant's simulated NVML, installed into pynvml, answering as the environment
    says."""
    answers = os.environ.get(ANSWERS_VARIABLE, "live")
    if answers not in ANSWERS:
        raise SystemExit(f"{ANSWERS_VARIABLE}={answers!r}: expected one of {', '.join(ANSWERS)}")
    return FakeNvml(fleet, precomputed=answers == "precomputed").install()


def serve_kubelet(fleet: FleetSpec, socket_path: str) -> None:
    from exporter.simulator.fake_kubelet import FakeKubelet

    FakeKubelet(FakeNvml(fleet), socket_path).start()
    while True:
        time.sleep(3600)


def serve_ours(fleet: FleetSpec, argv: list[str]) -> int:
    simulated_nvml(fleet)
    from exporter.cli import main

    return main(argv)


def serve_baseline(fleet: FleetSpec, port: str, socket_path: str, interval: str) -> None:
    simulated_nvml(fleet)
    from benchmarks.baseline_exporter import serve

    serve(fleet.node_name, socket_path or None, int(port), float(interval))


def serve_nvitop(fleet: FleetSpec, port: str, interval: str) -> int:
    simulated_nvml(fleet)
    from nvitop_exporter.cli import main

    sys.argv = ["nvitop-exporter", "--bind-address=127.0.0.1", f"--port={port}"]
    sys.argv += [f"--interval={interval}", f"--hostname={fleet.node_name}"]
    return main()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    fleet = fleet_spec(argv[0])
    role, rest = argv[1], argv[2:]
    if role == "kubelet":
        serve_kubelet(fleet, *rest)
    elif role == "ours":
        return serve_ours(fleet, rest)
    elif role == "baseline":
        serve_baseline(fleet, *rest)
    elif role == "nvitop":
        return serve_nvitop(fleet, *rest)
    else:
        raise SystemExit(f"unknown role {role!r}: kubelet, ours, baseline or nvitop")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
