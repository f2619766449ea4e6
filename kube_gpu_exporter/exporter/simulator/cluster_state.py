"""What the Kubernetes API would hold about the simulated node, served from the in-process fake
API (kube_gpu_exporter/exporter/simulator/fake_kube_api.py) under `--simulate --kubernetes`: the
fake kubelet's pods with labels and owners, the node with gpu-feature-discovery's labels, and the
ResourceSlices of NVIDIA's DRA driver.

Pod UIDs are the process table's (processes.pod_uid), so process accounting and the API name a
pod alike. Owners follow how such pods are made: training workers by a Job, `<app>-<hash>-<id>`
pods by a Deployment's ReplicaSet, batch pods by a Job, node agents by a DaemonSet; the other
pods have none, as a bare pod has none.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kube_gpu_exporter.exporter.simulator.fake_kube_api import FakeKubeApi, write_kubeconfig
from kube_gpu_exporter.exporter.simulator.gpu_models import (
    ARCH_ADA,
    ARCH_AMPERE,
    ARCH_HOPPER,
    ARCH_TURING,
)
from kube_gpu_exporter.exporter.simulator.processes import pod_uid
from kube_gpu_exporter.exporter.simulator.resource_slices import resource_slices

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet, FakePod
    from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml

# The pod label the simulated cluster sets on every pod; `--simulate --kubernetes` allow-lists it
# when no --kubernetes.pod-label-allowlist is given, so label_team shows.
TEAM_LABEL = "team"
_TEAMS = {
    "ml-training": "research",
    "inference": "serving",
    "batch": "data",
    "monitoring": "platform",
    "kube-system": "platform",
}
_NODE_AGENT_NAMESPACES = frozenset({"monitoring", "kube-system"})
# A Deployment's pod: <deployment>-<pod-template-hash>-<id>, the last two of five characters.
_DEPLOYMENT_POD = re.compile(r"(?P<deployment>.+)-(?P<hash>[a-z0-9]{5})-[a-z0-9]{5}")
_TRAINING_WORKER = re.compile(r"(?P<job>.+)-worker-\d+")
_FAMILIES = {
    ARCH_TURING: "turing",
    ARCH_AMPERE: "ampere",
    ARCH_ADA: "ada-lovelace",
    ARCH_HOPPER: "hopper",
}
_CUDA_DRIVER = ("12", "4", "0")  # what FakeNvml's nvmlSystemGetCudaDriverVersion answers


@dataclass(frozen=True, slots=True)
class SimulatedCluster:
    api: FakeKubeApi
    kubeconfig: Path


def pod_object(api: FakeKubeApi, seed: int, pod: FakePod) -> dict:
    """The pod as the API server serves it: the process table's UID, a team label, its owner."""
    labels = {TEAM_LABEL: _TEAMS.get(pod.namespace, "default")}
    owner: tuple[str, str] | None = None
    if pod.namespace == "ml-training" and (worker := _TRAINING_WORKER.fullmatch(pod.name)):
        owner = ("Job", worker["job"])
        labels["batch.kubernetes.io/job-name"] = worker["job"]
    elif deployment := _DEPLOYMENT_POD.fullmatch(pod.name):
        # The ReplicaSet's name ends in the template hash, which is how the watcher names the
        # Deployment behind it.
        labels["pod-template-hash"] = deployment["hash"]
        labels["app.kubernetes.io/name"] = deployment["deployment"]
        owner = ("ReplicaSet", f"{deployment['deployment']}-{deployment['hash']}")
    elif pod.namespace == "batch":
        owner = ("Job", pod.name)
    elif pod.namespace in _NODE_AGENT_NAMESPACES:
        owner = ("DaemonSet", pod.name.rsplit("-", 1)[0])
    return api.pod(
        pod.namespace,
        pod.name,
        uid=pod_uid(seed, pod.namespace, pod.name),
        labels=labels,
        owner=owner,
    )


def node_labels(nvml: FakeNvml, mig_strategy: str) -> dict[str, str]:
    """The labels gpu-feature-discovery would set on the node, from its first GPU."""
    gpus = nvml.gpus
    if not gpus:
        return {}
    model = gpus[0].model
    major, minor = model.compute_capability
    driver = [*nvml.fleet.driver_version.split("."), "0", "0"][:3]
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": model.name.replace(" ", "-"),
        "nvidia.com/gpu.count": str(len(gpus)),
        "nvidia.com/gpu.memory": str(model.memory_mib),
        "nvidia.com/gpu.family": _FAMILIES.get(model.architecture, "unknown"),
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.compute.minor": str(minor),
        "nvidia.com/cuda.driver.major": driver[0],
        "nvidia.com/cuda.driver.minor": driver[1],
        "nvidia.com/cuda.driver.rev": driver[2],
        "nvidia.com/cuda.runtime.major": _CUDA_DRIVER[0],
        "nvidia.com/cuda.runtime.minor": _CUDA_DRIVER[1],
        "nvidia.com/mig.capable": str(model.mig_capable).lower(),
        "nvidia.com/mig.strategy": mig_strategy,
        # Changes on every relabel; the exporter leaves it out, as a real node would need.
        "nvidia.com/gfd.timestamp": str(int(time.time())),
    }


def publish(api: FakeKubeApi, nvml: FakeNvml, kubelet: FakeKubelet) -> None:
    """Put the simulated node's pods, node object and ResourceSlices into `api`."""
    seed = nvml.fleet.seed
    for pod in kubelet.pods:
        api.put_pod(pod_object(api, seed, pod))
    api.set_node_labels(node_labels(nvml, kubelet.mig_strategy))
    for obj in resource_slices(nvml, name_format=kubelet.dra_name_format):
        obj["spec"]["nodeName"] = api.node
        api.put_slice(obj)


@contextlib.contextmanager
def simulated_cluster(
    nvml: FakeNvml, kubelet: FakeKubelet, node_name: str, directory: Path
) -> Iterator[SimulatedCluster]:
    """The fake API serving the node's cluster state on a loopback port, and a kubeconfig in
    `directory` that points the Kubernetes client at it."""
    api = FakeKubeApi(node_name)
    publish(api, nvml, kubelet)
    api.start()
    try:
        yield SimulatedCluster(api, write_kubeconfig(directory / "kubeconfig", api.host))
    finally:
        api.stop()
