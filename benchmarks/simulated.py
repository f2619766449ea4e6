"""Runs one benchmark participant on a simulated GPU node, in its own process.

    python -m benchmarks.simulated FLEET kubelet SOCKET
    python -m benchmarks.simulated FLEET ours [exporter flags...]
    python -m benchmarks.simulated FLEET baseline PORT SOCKET INTERVAL
    python -m benchmarks.simulated FLEET nvitop PORT INTERVAL

FLEET is a fleet file or `default`. Every exporter gets the same simulated NVML, in its own
process: ours and the baseline are handed the simulator's api object; nvitop-exporter, which
imports pynvml itself, gets it through foreign_nvml.py. The fake kubelet runs in a process of its
own, as the real kubelet does, so an exporter's CPU and memory are its own.

With BENCH_NVML_ANSWERS=precomputed in the environment, the simulated NVML replays remembered
answers instead of computing them (benchmarks/precomputed_answers.py): what the participant then
spends is its own cost, with the simulator's share removed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.precomputed_answers import precomputed_api
from kube_gpu_exporter.exporter.nvml.source import NvmlSource
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec, default_fleet, load_fleet

FLEETS_DIR = Path(__file__).resolve().parent / "fleets"
ANSWERS_VARIABLE = "BENCH_NVML_ANSWERS"
ANSWERS = ("live", "precomputed")


def fleet_spec(name: str) -> FleetSpec:
    """`default`, a file in benchmarks/fleets/ by its stem, or a path."""
    if name == "default":
        return default_fleet()
    path = FLEETS_DIR / f"{name}.yaml"
    return load_fleet(path if path.exists() else name)


def simulated_nvml(fleet: FleetSpec) -> NvmlSource:
    """The participant's simulated NVML, answering as the environment says."""
    answers = os.environ.get(ANSWERS_VARIABLE, "live")
    if answers not in ANSWERS:
        raise SystemExit(f"{ANSWERS_VARIABLE}={answers!r}: expected one of {', '.join(ANSWERS)}")
    sim = FakeNvml(fleet)
    return NvmlSource(precomputed_api(sim) if answers == "precomputed" else sim.api)


def run_exporter(nvml: NvmlSource, argv: Sequence[str]) -> int:
    """`kube-gpu-exporter ARGV` as on a GPU host, with `nvml` where the host's library would be:
    the command line's own steps (kube_gpu_exporter/exporter/cli.py, main), on a backend that hands
    the poller `nvml`."""
    import socket

    from kube_gpu_exporter.exporter.app import ignore_stray_signals, run
    from kube_gpu_exporter.exporter.flags.settings import parse_config
    from kube_gpu_exporter.exporter.logs import configure_logging
    from kube_gpu_exporter.exporter.node_backend import NodeBackend

    config = parse_config(argv)
    configure_logging(config.log_level, config.log_format)
    ignore_stray_signals()
    backend = NodeBackend(nvml=nvml, config=config, node_name=socket.gethostname())
    try:
        return run(contextlib.nullcontext(backend), config.web.listen_address)
    except KeyboardInterrupt:
        return 0


def serve_kubelet(fleet: FleetSpec, socket_path: str) -> None:
    from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet

    FakeKubelet(FakeNvml(fleet), socket_path).start()
    while True:
        time.sleep(3600)


def serve_ours(fleet: FleetSpec, argv: list[str]) -> int:
    return run_exporter(simulated_nvml(fleet), argv)


def serve_baseline(fleet: FleetSpec, port: str, socket_path: str, interval: str) -> None:
    nvml = simulated_nvml(fleet)
    from benchmarks.baseline_exporter import serve

    serve(nvml.api, fleet.node_name, socket_path or None, int(port), float(interval))


def serve_nvitop(fleet: FleetSpec, port: str, interval: str) -> int:
    from benchmarks.foreign_nvml import point_pynvml_at

    point_pynvml_at(simulated_nvml(fleet).api)
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
