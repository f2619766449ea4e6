"""What the renderer reads: a NodeSnapshot joined with its pods (join.py). Label sets come
complete and values as numbers, so kube_gpu_exporter/exporter/exposition/ renders a node without
importing any source it was joined with (pod-resources, the Kubernetes API, process accounting)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kube_gpu_exporter.exporter.snapshot import (
    CollectorStatus,
    GpuReadings,
    GpuSnapshot,
    MigInstance,
    NodeSnapshot,
    ProfilingReadings,
    XidRecord,
)

Labels = tuple[tuple[str, str], ...]
# One sample of a family: its whole label set, and its value.
CountRow = tuple[Labels, int]
# One container's processes on one device: their labels (the device's, the host's, then
# namespace, pod and container), how many they are, the device memory they hold (None: NVML gave
# no figure for any of them) and their SM share, 0-1 (None on a MIG instance, where NVML has no
# per-process share). A tuple, not a dataclass: a node has hundreds, made once per snapshot.
ContainerUse = tuple[Labels, int, int | None, float | None]
# One sample of a family with a fractional value: its whole label set, and its value.
ValueRow = tuple[Labels, float]


@dataclass(frozen=True, slots=True)
class Entity:
    """One DCGM entity as its series show it: a GPU, or a GPU instance of a MIG-enabled GPU,
    possibly one of several per-pod copies of it."""

    gpu: GpuSnapshot
    instance: MigInstance | None
    labels: Labels
    readings: GpuReadings
    xid: XidRecord
    profiling: ProfilingReadings | None = None


@dataclass(frozen=True, slots=True)
class Capacity:
    """What the node can hand out and has handed out, device plugin and DRA together."""

    # GPU UUID -> allocatable device IDs and DRA devices it backs, for every GPU of the
    # snapshot; None when the kubelet does not report allocatable devices.
    units_by_gpu: Mapping[str, int] | None
    # (resource, devices), sorted; None as above.
    allocatable: tuple[tuple[str, int], ...] | None
    # (resource, devices held), sorted, every allocatable resource included.
    allocated: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class PodUsage:
    """Per-container use of each device whose processes were read (process accounting)."""

    containers: tuple[ContainerUse, ...]
    # Per device and reason, the processes counted for no container.
    unattributed: tuple[CountRow, ...]


@dataclass(frozen=True, slots=True)
class EnergyShares:
    """How one GPU's energy is split now (energy_shares.py): every pod energy row of the GPU,
    with the fraction of the GPU's energy increase it gets. The fractions add up to 1; rows at 0
    are listed too, so that every holder's counter exists before its first joule."""

    uuid: str
    # (labels as POD_USAGE_LABELS orders them, fraction 0-1)
    rows: tuple[ValueRow, ...]
    # Which rule gave the split (energy_shares.py's SM_SHARES, HOLDERS...), for tests and logs.
    basis: str


@dataclass(frozen=True, slots=True)
class PodResourcesHealth:
    up: bool
    last_success_at: float | None
    errors: tuple[tuple[str, int], ...]  # (gRPC status code name, count)


@dataclass(frozen=True, slots=True)
class KubernetesHealth:
    pods_synced: bool
    node_synced: bool
    slices_synced: bool | None  # None: the ResourceSlice watch is off, or there is no DRA
    updated_at: tuple[tuple[str, float], ...]  # (resource, last update), those updated yet
    watch_errors: int
    relists: int
    labels_dropped: int
    series_labels_dropped: tuple[tuple[str, int], ...]  # (reason, pod label keys)
    # The node's GPU labels as Prometheus labels, with the host's; None until the node synced.
    node_info: Labels | None


@dataclass(frozen=True, slots=True)
class SourceHealth:
    podresources: PodResourcesHealth | None = None  # None: pod attribution is off
    kubernetes: KubernetesHealth | None = None  # None: Kubernetes API enrichment is off


@dataclass(frozen=True, slots=True)
class AttributedNode:
    """One NodeSnapshot joined with its pods: all that the renderer reads."""

    snapshot: NodeSnapshot
    entities: tuple[Entity, ...]
    # The pod-resources and Kubernetes sources as node_exporter-style collectors.
    collectors: tuple[CollectorStatus, ...] = ()
    sources: SourceHealth = SourceHealth()
    # None below also stands for a part that failed (then named in `failures`).
    capacity: Capacity | None = None  # None: no pod-resources data
    # POD_DEVICE_ALLOCATION's samples; None: pod attribution is off.
    allocations: tuple[CountRow, ...] | None = None
    # DRA_DEVICES_UNRESOLVED's samples; None: pod attribution is off.
    dra_unresolved: tuple[CountRow, ...] | None = None
    pod_usage: PodUsage | None = None  # None: no process list was read
    # Per GPU, how its energy is split among containers; None: pod attribution is off, the
    # kubelet has not answered yet, or the split (or the whole pod join) failed.
    energy_shares: tuple[EnergyShares, ...] | None = None
    # POD_GPU_ENERGY_JOULES_TOTAL's samples, added after the join by the ledger
    # (pod_energy.py), which keeps the sums between snapshots; None: no counter yet.
    pod_energy: tuple[ValueRow, ...] | None = None
    # (part, error) for each part of the join that failed and is left out; the renderer counts
    # them with its own failures.
    failures: tuple[tuple[str, Exception], ...] = ()
