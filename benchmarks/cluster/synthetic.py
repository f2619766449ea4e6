"""The synthetic cluster: which simulated nodes it is made of, and its history as OpenMetrics text
for `promtool tsdb create-blocks-from openmetrics`.

Each node is one of a few node types whose exposition was recorded step by step from the
exporter itself (`node_history`). A cluster node takes its type's series with its own name, GPU
and MIG UUIDs, pod names and workload owners, the target labels Prometheus would add
(`job`, `instance`, and `node` from the bundle's scrape config), and its type's values from a
start step of its own, so nodes of one type are not in lockstep. Beside them: Prometheus' own
per-target series (`up`, `scrape_*`), and the kube-state-metrics series the bundle's rules join
(node cordons, GPU pods' requests and phases, some Pending GPU pods).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TextIO

from benchmarks.cluster.node_history import NodeHistory
from kube_gpu_exporter.bundle.config import DEFAULT

STEP_SECONDS = 15
EXPORTER_JOB = "kube-gpu-exporter"
KSM = 'job="kube-state-metrics",instance="10.1.0.1:8080"'
PENDING_PODS = 40
CORDONED_EVERY = 97  # one node in 97 is cordoned
_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
_ALLOCATION = "kube_gpu_exporter_pod_device_allocation{"
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class NodeGroup:
    fleet: str
    count: int


# 8,000 GPUs on 1,000 nodes: mostly whole H100s, an older A100 pool with some halves, nodes like
# the default simulated one, and dense-MIG nodes (56 instances each).
CLUSTER: tuple[NodeGroup, ...] = (
    NodeGroup("cluster-h100", 600),
    NodeGroup("default", 200),
    NodeGroup("cluster-a100", 150),
    NodeGroup("mig-56", 50),
)


@dataclass(frozen=True, slots=True)
class Scale:
    cluster: tuple[NodeGroup, ...] = CLUSTER
    window_seconds: int = 2 * 3600
    # Nodes start their type's history at different steps, up to this many into it.
    spread_steps: int = 240
    # About 3 GB of text per chunk at full scale.
    nodes_per_chunk: int = 40

    @property
    def steps(self) -> int:
        return self.window_seconds // STEP_SECONDS

    @property
    def history_steps(self) -> int:
        return self.steps + self.spread_steps

    @property
    def nodes(self) -> list[tuple[str, int]]:
        """(fleet, node number) for every node, in node-number order."""
        nodes: list[tuple[str, int]] = []
        for group in self.cluster:
            first = len(nodes)
            nodes.extend((group.fleet, first + i) for i in range(group.count))
        return nodes

    def offset(self, n: int) -> int:
        return (n * 97) % self.spread_steps if self.spread_steps else 0


def node_name(n: int) -> str:
    return f"gpu-node-{n:04d}"


def _uuid(prefix: str, *parts: object) -> str:
    h = hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


# Which renaming applies to which label; every other label keeps its value. The histories are
# recorded with the bundle's host label (node_history.bundle_labels).
_RENAMED_LABELS = {
    DEFAULT.host_label: "node",
    "UUID": "uuid",
    "mig_uuid": "uuid",
    "device_id": "uuid",  # GPU-..., MIG-... and replica ids GPU-...::N
    "pod": "pod",
    "owner_name": "owner",
    "pod_uid": "uid",
}
_UUID = re.compile(r"(?:GPU|MIG)-[0-9a-f-]{36}")


@dataclass
class NodeType:
    """A recorded node type, prepared for stamping out cluster nodes quickly."""

    history: NodeHistory
    columns: list[list[str | None]]  # [series][step]

    @classmethod
    def of(cls, history: NodeHistory) -> NodeType:
        return cls(history, [list(c) for c in zip(*history.values, strict=True)])

    def renames(self, n: int) -> dict[str, dict[str, str]]:
        """Per kind of label, old value -> node `n`'s value."""
        h = self.history
        # Workloads span 16 nodes: a Job's workers or a Deployment's replicas on many machines.
        group = n // 16
        return {
            "node": {h.node_name: node_name(n)},
            "uuid": {uuid: _uuid(uuid[:3], n, uuid) for uuid in h.gpu_uuids},
            "pod": {pod: f"{pod}-n{n:04d}" for _, pod, _, _ in h.pods},
            "owner": {owner: f"{owner}-g{group:02d}" for _, _, _, owner in h.pods},
            "uid": {f"uid-{ns}-{pod}": _uuid("uid", n, pod)[4:] for ns, pod, _, _ in h.pods},
        }

    def series_for(self, n: int, with_target: bool = True) -> list[str]:
        """Every series of node `n`, renamed, with the target labels of its scrape unless a
        real Prometheus scrapes it and adds them itself."""
        renames = self.renames(n)
        uuids = renames["uuid"]

        def rename(match: re.Match[str]) -> str:
            label, value = match.group(1), match.group(2)
            kind = _RENAMED_LABELS.get(label)
            if kind == "uuid":
                value = _UUID.sub(lambda u: uuids.get(u.group(0), u.group(0)), value)
            elif kind is not None:
                value = renames[kind].get(value, value)
            return f'{label}="{value}"'

        targets = target_labels(n)
        out = []
        for key in self.history.series:
            key = _LABEL.sub(rename, key)
            if not with_target:
                out.append(key)
            elif key.endswith("}"):
                out.append(f"{key[:-1]},{targets}}}")
            else:
                out.append(f"{key}{{{targets}}}")
        return out


def target_labels(n: int) -> str:
    return f'job="{EXPORTER_JOB}",instance="10.0.{n // 256}.{n % 256}:9455",node="{node_name(n)}"'


class HistoryWriter:
    """OpenMetrics text, series by series: each series' samples in time order, then `# EOF`."""

    def __init__(self, out: TextIO, start: int, steps: int) -> None:
        self._out = out
        self._stamps = [f" {start + k * STEP_SECONDS}\n" for k in range(steps)]
        self.steps = steps
        self.samples = 0
        self.series = 0

    def write(self, key: str, values: list[str | None]) -> None:
        prefix = key + " "
        lines = [prefix + v + t for v, t in zip(values, self._stamps, strict=True) if v is not None]
        self._out.write("".join(lines))
        self.samples += len(lines)
        self.series += 1

    def constant(self, key: str, value: str) -> None:
        self.write(key, [value] * len(self._stamps))

    def close(self) -> None:
        self._out.write("# EOF\n")


def write_node(
    writer: HistoryWriter, node_type: NodeType, n: int, start: int
) -> list[dict[str, str]]:
    """Node `n`'s exporter series from step `start` of its type's history, its target's scrape
    series and its kube-state-metrics node series; returns the labels of its pod-device
    allocations, for the pod series."""
    steps = writer.steps
    allocations = []
    for key, column in zip(node_type.series_for(n), node_type.columns, strict=True):
        writer.write(key, column[start : start + steps])
        if key.startswith(_ALLOCATION):
            allocations.append(dict(_LABEL.findall(key)))
    target = target_labels(n)
    scraped = str(len(node_type.columns))
    writer.constant(f"up{{{target}}}", "1")
    writer.constant(f"scrape_duration_seconds{{{target}}}", "0.004")
    writer.constant(f"scrape_samples_scraped{{{target}}}", scraped)
    writer.constant(f"scrape_samples_post_metric_relabeling{{{target}}}", scraped)
    writer.constant(f"scrape_series_added{{{target}}}", "0")
    cordoned = "1" if n % CORDONED_EVERY == CORDONED_EVERY - 1 else "0"
    writer.constant(f'kube_node_spec_unschedulable{{{KSM},node="{node_name(n)}"}}', cordoned)
    return allocations


def write_pods(writer: HistoryWriter, n: int, allocations: list[dict[str, str]]) -> None:
    """kube-state-metrics' view of the GPU pods on node `n`: requests and phases."""
    requests: dict[tuple[str, str, str, str], int] = {}
    for labels in allocations:
        key = (labels["namespace"], labels["pod"], labels["container"], labels["resource"])
        requests[key] = requests.get(key, 0) + 1
    pods = sorted({(ns, pod) for ns, pod, _, _ in requests})
    for (namespace, pod, container, resource), count in sorted(requests.items()):
        writer.constant(_request(namespace, pod, container, resource, node_name(n)), str(count))
    for namespace, pod in pods:
        _phases(writer, namespace, pod, "Running")


def write_pending(writer: HistoryWriter) -> None:
    for i in range(PENDING_PODS):
        namespace = ("ml-training", "inference", "batch")[i % 3]
        pod = f"pending-gpu-job-{i:03d}"
        resource = "nvidia.com/gpu" if i % 4 else "nvidia.com/mig-1g.10gb"
        writer.constant(_request(namespace, pod, "main", resource, ""), str(1 + i % 8))
        _phases(writer, namespace, pod, "Pending")


def _request(namespace: str, pod: str, container: str, resource: str, node: str) -> str:
    ksm_resource = re.sub(r"[^a-zA-Z0-9_]", "_", resource)
    return (
        f'kube_pod_container_resource_requests{{{KSM},namespace="{namespace}",pod="{pod}",'
        f'uid="{_uuid("uid", namespace, pod)[4:]}",container="{container}",node="{node}",'
        f'resource="{ksm_resource}",unit="integer"}}'
    )


def _phases(writer: HistoryWriter, namespace: str, pod: str, current: str) -> None:
    uid = _uuid("uid", namespace, pod)[4:]
    for phase in _PHASES:
        writer.constant(
            f'kube_pod_status_phase{{{KSM},namespace="{namespace}",pod="{pod}",uid="{uid}",'
            f'phase="{phase}"}}',
            "1" if phase == current else "0",
        )
