"""Measurements made inside one process on one simulated node: render time per snapshot and NVML
calls per sweep, for the exporter, the baseline and nvitop-exporter on the same simulated NVML.

    python -m benchmarks.inprocess FLEET      # prints one JSON object

Run in a child process per fleet, so the simulated NVML (which nvitop, unable to be handed one,
reaches through pynvml: foreign_nvml.py) and nvitop's import-time state never meet another
fleet's.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import sys
import tempfile
import time
import timeit
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.simulated import fleet_spec
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml

# Blocking waits for events are not polls: they sit in the driver until an XID arrives.
_WAITS = ("nvmlEventSetWait", "nvmlEventSetWait_v2")
# Run the real poller at a shortened interval, with the PCIe sampler at a third of its rate, as
# the defaults are (5 s sweep, 15 s PCIe), to count what one sweep costs with its helpers.
_SWEEP_SECONDS = 0.25
_SWEEPS = 16


def median_ms(fn: Callable[[], Any], repeat: int = 7) -> float:
    """Median milliseconds per call; enough calls per round that each round takes ~0.2 s."""
    once = max(timeit.repeat(fn, number=1, repeat=3))
    number = max(1, int(0.2 / max(once, 1e-6)))
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e3


def _calls_during(nvml: FakeNvml, action: Callable[[], Any]) -> Counter[str]:
    before = Counter(nvml.calls)
    action()
    after = Counter(nvml.calls)
    after.subtract(before)
    return Counter({k: v for k, v in after.items() if v > 0 and k not in _WAITS})


def _wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("the poller did not sweep in time")
        time.sleep(0.01)


def measure_ours(nvml: FakeNvml, socket_path: str) -> dict[str, Any]:
    from kube_gpu_exporter.exporter.attribution.context import AttributionContext
    from kube_gpu_exporter.exporter.attribution.join import join
    from kube_gpu_exporter.exporter.attribution.model import AttributedNode
    from kube_gpu_exporter.exporter.config import CollectionConfig, LabelConfig
    from kube_gpu_exporter.exporter.exposition.renderer import Renderer
    from kube_gpu_exporter.exporter.exposition.store import build_exposition
    from kube_gpu_exporter.exporter.podresources.client import (
        PodResourcesClient,
        PodResourcesWatcher,
    )
    from kube_gpu_exporter.exporter.poller import Poller
    from kube_gpu_exporter.exporter.snapshot import NodeSnapshot

    watcher = PodResourcesWatcher(PodResourcesClient(socket_path), 5.0)
    if not watcher.refresh():
        raise RuntimeError(f"fake kubelet: {watcher.status.last_error}")
    context = AttributionContext(pods=watcher.latest, pods_status=watcher.status)

    sweeps: list[Any] = []
    config = CollectionConfig(
        interval_seconds=_SWEEP_SECONDS, pcie_interval_seconds=3 * _SWEEP_SECONDS
    )
    poller = Poller(config, sweeps.append, nvml.source())

    # Two warm-up sweeps learn identities, MIG layouts and NOT_SUPPORTED answers; count after.
    poller.start()
    _wait_for(lambda: len(sweeps) >= 2)
    counted_from = len(sweeps)
    calls = _calls_during(nvml, lambda: _wait_for(lambda: len(sweeps) >= counted_from + _SWEEPS))
    swept = len(sweeps) - counted_from
    poller.stop()
    snapshot = sweeps[-1]
    labels = LabelConfig(node_name=nvml.fleet.node_name)
    renderer = Renderer(labels)

    def attributed(snapshot: NodeSnapshot) -> AttributedNode:
        return join(snapshot, context, labels)

    exposition = build_exposition(snapshot, renderer, attributed)
    per_sweep = {k: v / swept for k, v in calls.items()}
    return {
        "nvml_calls_per_sweep": round(sum(per_sweep.values()), 1),
        "nvml_calls_by_function": {k: round(v, 2) for k, v in sorted(per_sweep.items())},
        # Joined and rendered, the body's cost per snapshot.
        "render_ms": median_ms(lambda: renderer.render_body(attributed(snapshot))),
        "render_gzip_ms": median_ms(lambda: build_exposition(snapshot, renderer, attributed)),
        "body_bytes": len(exposition.body),
    }


def measure_baseline(nvml: FakeNvml, socket_path: str) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

    from benchmarks.baseline_exporter import BaselineExporter

    nvml.api.nvmlInit()
    registry = CollectorRegistry()
    exporter = BaselineExporter(nvml.api, nvml.fleet.node_name, socket_path, registry)
    exporter.poll()
    calls = _calls_during(nvml, exporter.poll)
    return {
        "nvml_calls_per_sweep": sum(calls.values()),
        "nvml_calls_by_function": dict(sorted(calls.items())),
        "render_ms": median_ms(lambda: generate_latest(registry)),
        "render_openmetrics_ms": median_ms(lambda: generate_openmetrics(registry)),
        "render_gzip_ms": median_ms(lambda: gzip.compress(generate_latest(registry))),
    }


def measure_nvitop(nvml: FakeNvml) -> dict[str, Any]:
    from benchmarks.foreign_nvml import point_pynvml_at

    # Last in this process: ours and the baseline, handed `nvml.api`, have finished.
    point_pynvml_at(nvml.api)
    from nvitop import Device
    from nvitop_exporter.exporter import PrometheusExporter
    from prometheus_client import CollectorRegistry, generate_latest

    physical = Device.from_indices(range(Device.count()))
    devices = [*physical, *(m for d in physical for m in d.mig_devices())]
    registry = CollectorRegistry()
    exporter = PrometheusExporter(devices, hostname=nvml.fleet.node_name, registry=registry)

    def update() -> None:
        exporter.update_host()
        for device in exporter.devices:
            exporter.update_device(device)

    update()
    calls = _calls_during(nvml, update)
    return {
        "nvml_calls_per_sweep": sum(calls.values()),
        "nvml_calls_by_function": dict(sorted(calls.items())),
        "render_ms": median_ms(lambda: generate_latest(registry)),
        "render_gzip_ms": median_ms(lambda: gzip.compress(generate_latest(registry))),
    }


def measure(fleet_name: str) -> dict[str, Any]:
    from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet

    # Each call costs the CPU a real one does (call_costs.py), as on a node; only the PCIe
    # window's wait, which costs no CPU, is left out to keep the run short.
    fleet = replace(fleet_spec(fleet_name), pcie_window_ms=0.0)
    nvml = FakeNvml(fleet)
    with tempfile.TemporaryDirectory(prefix="kge-bench-") as tmp:
        socket_path = str(Path(tmp) / "kubelet.sock")
        kubelet = FakeKubelet(nvml, socket_path).start()
        try:
            ours = measure_ours(nvml, socket_path)
            baseline = measure_baseline(nvml, socket_path)
        finally:
            kubelet.stop()
    nvitop = measure_nvitop(nvml)
    return {"ours": ours, "baseline": baseline, "nvitop": nvitop}


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(json.dumps(measure(sys.argv[1])), flush=True)
    # Helper threads blocked in simulated NVML calls must not hold the process open.
    os._exit(0)


if __name__ == "__main__":
    main()
