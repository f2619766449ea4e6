"""The exporter's own exposition of one simulated node, at every step of a simulated time line.

    python -m benchmarks.cluster.node_history FLEET STEPS STEP_SECONDS OUT.pickle

Runs the production collector, attribution and renderer unchanged: the simulated NVML gets a
clock this module moves forward one scrape interval at a time, the poller's PCIe and GPM samplers
are stepped with it instead of running on wall-clock threads, pod attribution comes from the fake
kubelet over its real socket, and the Kubernetes enrichment view carries each pod's owner. What
comes out is every series the exporter serves for that node and its value at each step, so the
synthetic cluster's history has the exporter's real names, labels, cardinality and signal shapes.
"""

from __future__ import annotations

import pickle
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from benchmarks.simulated import fleet_spec

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.config import LabelConfig

# A pod's owner from its name, the way controllers name pods: a Job's `-worker-N`, or the random
# ReplicaSet and pod suffixes of a Deployment.
_GENERATED_SUFFIX = re.compile(r"(-worker-\d+|(-[0-9a-z]{5})+)$")
_BATCH_NAMESPACES = ("ml-training", "batch")
WARMUP_STEPS = 2  # GPM needs two samples before it reports anything


@dataclass
class NodeHistory:
    fleet: str
    node_name: str  # the simulated node's own name, to be replaced per cluster node
    gpu_uuids: list[str]  # GPU and MIG UUIDs, likewise
    pods: list[tuple[str, str, str, str]]  # (namespace, pod, owner kind, owner name)
    series: list[str]  # `name{labels}` as rendered
    values: list[list[str | None]]  # [step][series]: the rendered value, None where absent


def owner_of(namespace: str, pod: str) -> tuple[str, str]:
    kind = "Job" if namespace in _BATCH_NAMESPACES else "Deployment"
    return kind, _GENERATED_SUFFIX.sub("", pod) or pod


def bundle_labels(node_name: str) -> LabelConfig:
    """The exporter's labels as the bundle's default flavour reads them: its dcgm-exporter
    profile, with the driver-version label that profile puts on every DCGM series, and the
    bundle's host label."""
    from kube_gpu_exporter.bundle.config import DEFAULT
    from kube_gpu_exporter.exporter.config import HostLabel, LabelConfig

    dcgm = DEFAULT.profile
    return LabelConfig(
        host_label=HostLabel(DEFAULT.host_label),
        node_name=node_name,
        driver_version_label=dcgm.driver_label,
        dcgm=dcgm,
    )


def record(fleet_name: str, steps: int, step_seconds: float) -> NodeHistory:
    from kube_gpu_exporter.exporter.attribution.context import AttributionContext
    from kube_gpu_exporter.exporter.attribution.join import join
    from kube_gpu_exporter.exporter.attribution.pod_energy import PodEnergyLedger
    from kube_gpu_exporter.exporter.config import CollectionConfig
    from kube_gpu_exporter.exporter.exposition.renderer import Renderer
    from kube_gpu_exporter.exporter.kubernetes.pod_metadata import EMPTY_VIEW, PodMetadata
    from kube_gpu_exporter.exporter.podresources.client import (
        PodResourcesClient,
        PodResourcesWatcher,
    )
    from kube_gpu_exporter.exporter.poller import Poller
    from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
    from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
    from kube_gpu_exporter.exporter.simulator.host_tree import HostTree
    from kube_gpu_exporter.exporter.simulator.processes import ProcessTable
    from kube_gpu_exporter.exporter.simulator.stepped_time import SteppedHelpers

    # A history stepped in simulated time: what NVML costs has no bearing on its values, and
    # charging it would only make the backfill slower.
    fleet = replace(
        fleet_spec(fleet_name), call_costs="flat", call_latency_us=0.0, pcie_window_ms=0.0
    )
    clock = [0.0]
    nvml = FakeNvml(fleet, clock=lambda: clock[0])
    tmp = tempfile.TemporaryDirectory(prefix="kge-history-")
    kubelet = FakeKubelet(nvml, Path(tmp.name) / "kubelet.sock").start()
    try:
        watcher = PodResourcesWatcher(PodResourcesClient(str(kubelet.socket_path)), 1.0)
        latest = watcher.latest if watcher.refresh() else None
        if latest is None:
            raise RuntimeError(f"fake kubelet: {watcher.status.last_error}")
    finally:
        kubelet.stop()
    # The pods' processes and the host's /proc and /var/log, for per-pod use of shared GPUs.
    processes = ProcessTable(nvml, kubelet)
    nvml.processes = processes
    host = HostTree(processes, Path(tmp.name) / "host").refresh()
    pods = sorted({(a.namespace, a.pod) for a in latest.allocations})
    metadata = {
        (ns, pod): PodMetadata(ns, pod, f"uid-{ns}-{pod}", *owner_of(ns, pod), ())
        for ns, pod in pods
    }
    view = replace(
        EMPTY_VIEW,
        pods=MappingProxyType(metadata),
        node_labels=(
            ("nvidia.com/gpu.count", str(len(fleet.gpus))),
            ("nvidia.com/gpu.product", fleet.gpus[0].model.name.replace(" ", "-")),
        ),
        pods_synced=True,
        node_synced=True,
    )
    context = AttributionContext(pods=latest, pods_status=watcher.status, kube=view)
    # Helper rounds on the simulated clock this history steps, not on threads of their own.
    stepped = SteppedHelpers()
    poller = Poller(
        CollectionConfig(
            interval_seconds=step_seconds,
            # Every field every step: the slow fields' cadence and the energy estimate run on
            # the real clock, and this history steps a simulated one.
            slow_fields_interval_seconds=0.0,
            energy_read_interval_seconds=0.0,
            xid_enabled=False,
            processes_enabled=True,
            proc_root=str(host.proc_root),
            log_root=str(host.log_root),
        ),
        lambda snapshot: None,
        nvml.source(),
        runner=stepped,
    )
    labels = bundle_labels(fleet.node_name)
    renderer = Renderer(labels)
    # The per-pod energy counters sum from one joined snapshot to the next, as the store's do.
    ledger = PodEnergyLedger()
    index: dict[str, int] = {}
    rows: list[dict[int, str]] = []
    try:
        for step in range(steps + WARMUP_STEPS):
            clock[0] = step * step_seconds
            snapshot = poller.sweep()
            stepped.run_once()
            if step < WARMUP_STEPS:
                continue
            row: dict[int, str] = {}
            node = ledger.attach(join(snapshot, context, labels))
            for line in renderer.render_body(node).splitlines():
                if not line or line.startswith("#"):
                    continue
                key, _, value = line.rpartition(" ")
                row[index.setdefault(key, len(index))] = value
            rows.append(row)
    finally:
        poller.stop()
        nvml.close()
        tmp.cleanup()
    uuids = [g.uuid for g in nvml.gpus]
    uuids += [i.uuid for g in nvml.gpus for i in g.live_instances()]
    return NodeHistory(
        fleet=fleet_name,
        node_name=fleet.node_name,
        gpu_uuids=uuids,
        pods=[(ns, pod, *owner_of(ns, pod)) for ns, pod in pods],
        series=list(index),
        values=[[row.get(i) for i in range(len(index))] for row in rows],
    )


def save(history: NodeHistory, path: Path) -> None:
    # Plain containers, not the class: run as __main__, the class would pickle under that name.
    path.write_bytes(pickle.dumps(asdict(history), protocol=pickle.HIGHEST_PROTOCOL))


def load(path: Path) -> NodeHistory:
    return NodeHistory(**pickle.loads(path.read_bytes()))


def main() -> None:
    fleet, steps, step_seconds, out = sys.argv[1:]
    save(record(fleet, int(steps), float(step_seconds)), Path(out))


if __name__ == "__main__":
    main()
