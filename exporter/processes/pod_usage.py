"""Each container's share of a GPU or MIG instance, from the processes NVML lists on it.

A process counts for a container only when its pod holds the device, or shares it, according to
the kubelet (the attribution); everything else stays on the device's unattributed row with the
reason: host processes, processes of pods that do not hold the device, PIDs this exporter cannot
see, processes that ended before they were looked up. Nothing is dropped, so the rows of a device
add up to everything NVML reported on it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporter.processes.owner import UNKNOWN_CONTAINER
from exporter.snapshot import GpuProcess, NodeSnapshot

if TYPE_CHECKING:
    from exporter.kubernetes.pod_metadata import KubernetesView
    from exporter.podresources.attribution import Attribution

# A process whose pod does not hold the device it runs on.
NOT_HOLDER = "not_holder"
# A process of a pod, with pod-resources off: nothing says which pod holds the device.
HOLDER_UNKNOWN = "holder_unknown"

DeviceKey = tuple[str, int | None]  # (GPU UUID, GPU-instance id or None)
ContainerKey = tuple[str, str, str]  # (namespace, pod, container)
UNATTRIBUTED: ContainerKey = ("", "", "")


@dataclass(frozen=True, slots=True)
class Usage:
    processes: int = 0
    memory_bytes: int | None = None
    # Sum of the processes' SM shares, percent; None when NVML gave no share for any of them.
    sm_pct: int | None = None

    def plus(self, process: GpuProcess) -> Usage:
        memory = self.memory_bytes
        if process.used_memory_bytes is not None:
            memory = (memory or 0) + process.used_memory_bytes
        sm = self.sm_pct
        if process.sm_util_pct is not None:
            sm = (sm or 0) + process.sm_util_pct
        return Usage(self.processes + 1, memory, sm)


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    # Every container with processes on the device, and UNATTRIBUTED (always present).
    by_container: Mapping[ContainerKey, Usage]
    # reason -> unattributed processes.
    unattributed: Mapping[str, int]


def _uid_index(kube: KubernetesView | None) -> dict[str, tuple[str, str]]:
    if kube is None:
        return {}
    return {meta.uid: (meta.namespace, meta.name) for meta in kube.pods.values() if meta.uid}


def pod_usage(
    snapshot: NodeSnapshot,
    attribution: Attribution | None,
    kube: KubernetesView | None = None,
) -> dict[DeviceKey, DeviceUsage]:
    """Per device whose processes were read: each holding container's use, and the rest.

    `attribution` None: pod-resources is off, so no process counts for a pod; the processes of
    pods are unattributed as HOLDER_UNKNOWN, the others with their own reason."""
    by_uid = _uid_index(kube)
    usage: dict[DeviceKey, DeviceUsage] = {}
    for gpu in snapshot.gpus:
        if gpu.processes is None or not gpu.up:
            continue
        uuid = gpu.identity.uuid
        devices: list[int | None] = (
            [inst.gpu_instance_id for inst in gpu.mig_instances]
            if gpu.identity.mig_enabled
            else [None]
        )
        rows: dict[DeviceKey, dict[ContainerKey, Usage]] = {
            (uuid, gi): {UNATTRIBUTED: Usage(memory_bytes=0)} for gi in devices
        }
        reasons: dict[DeviceKey, Counter[str]] = defaultdict(Counter)
        for process in gpu.processes:
            key = (uuid, process.gpu_instance_id if gpu.identity.mig_enabled else None)
            if key not in rows:
                continue  # an instance destroyed since the topology was read
            holders = (
                None
                if attribution is None
                else {(h.namespace, h.pod) for h in attribution.for_device(*key)}
            )
            container, reason = _owner_of(process, holders, by_uid)
            if container is None:
                reasons[key][reason] += 1
                container = UNATTRIBUTED
            rows[key][container] = rows[key].get(container, Usage()).plus(process)
        for key, by_container in rows.items():
            usage[key] = DeviceUsage(by_container, dict(reasons[key]))
    return usage


def _owner_of(
    process: GpuProcess,
    holders: set[tuple[str, str]] | None,
    by_uid: Mapping[str, tuple[str, str]],
) -> tuple[ContainerKey | None, str]:
    owner = process.owner
    if owner is None:
        return None, process.unattributed_reason or UNKNOWN_CONTAINER
    if holders is None:
        return None, HOLDER_UNKNOWN
    namespace, pod = owner.namespace, owner.pod
    if not pod:
        namespace, pod = by_uid.get(owner.pod_uid, ("", ""))
    if not pod:
        return None, UNKNOWN_CONTAINER
    if (namespace, pod) not in holders:
        return None, NOT_HOLDER
    return (namespace, pod, owner.container), ""
