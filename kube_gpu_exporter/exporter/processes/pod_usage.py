"""Each container's share of a GPU or MIG instance, from the processes NVML lists on it.

A process counts for a container only when its pod holds the device, or shares it, according to
the kubelet (the attribution); everything else stays on the device's unattributed row with the
reason: host processes, processes of pods that do not hold the device, PIDs this exporter cannot
see, processes that ended before they were looked up, containers the kubelet's log names name
ambiguously. Nothing is dropped, so the rows of a device add up to everything NVML reported on it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kube_gpu_exporter.exporter.processes.owner import UNKNOWN_CONTAINER
from kube_gpu_exporter.exporter.snapshot import GpuProcess, NodeSnapshot, ProcessOwner

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.kubernetes.pod_metadata import KubernetesView
    from kube_gpu_exporter.exporter.podresources.attribution import Attribution

# A process whose pod does not hold the device it runs on.
NOT_HOLDER = "not_holder"
# A process of a pod, with pod-resources off: nothing says which pod holds the device.
HOLDER_UNKNOWN = "holder_unknown"
# A process whose container the kubelet's log names give several names, more than one of them
# a pod that holds the device: nothing says which it is.
AMBIGUOUS_CONTAINER = "ambiguous_container"

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
class _Holders:
    """Who the kubelet says holds one device."""

    pods: frozenset[tuple[str, str]]
    containers: frozenset[ContainerKey]


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
        holders_of: dict[DeviceKey, _Holders] = {}
        for process in gpu.processes:
            key = (uuid, process.gpu_instance_id if gpu.identity.mig_enabled else None)
            if key not in rows:
                continue  # an instance destroyed since the topology was read
            holders = None
            if attribution is not None:
                holders = holders_of.get(key)
                if holders is None:
                    holders = holders_of[key] = _holders(attribution, key)
            container, reason = _owner_of(process, holders, by_uid)
            if container is None:
                reasons[key][reason] += 1
                container = UNATTRIBUTED
            rows[key][container] = rows[key].get(container, Usage()).plus(process)
        for key, by_container in rows.items():
            usage[key] = DeviceUsage(by_container, dict(reasons[key]))
    return usage


def _holders(attribution: Attribution, key: DeviceKey) -> _Holders:
    found = attribution.for_device(*key)
    return _Holders(
        frozenset((h.namespace, h.pod) for h in found),
        frozenset((h.namespace, h.pod, h.container) for h in found),
    )


def _owner_of(
    process: GpuProcess,
    holders: _Holders | None,
    by_uid: Mapping[str, tuple[str, str]],
) -> tuple[ContainerKey | None, str]:
    owner = process.owner
    if owner is None:
        return None, process.unattributed_reason or UNKNOWN_CONTAINER
    if holders is None:
        return None, HOLDER_UNKNOWN
    if owner.name_candidates:
        return _one_of_the_candidates(owner, holders, by_uid)
    namespace, pod = owner.namespace, owner.pod
    if not pod:
        namespace, pod = by_uid.get(owner.pod_uid, ("", ""))
    if not pod:
        return None, UNKNOWN_CONTAINER
    if (namespace, pod) not in holders.pods:
        return None, NOT_HOLDER
    return (namespace, pod, owner.container), ""


def _one_of_the_candidates(
    owner: ProcessOwner, holders: _Holders, by_uid: Mapping[str, tuple[str, str]]
) -> tuple[ContainerKey | None, str]:
    """The container among the names the logs disagree on: the one whose pod the API server
    gives the cgroup's pod UID; without that, the one whose pod the UID's only log directory
    names; then the one whose pod (else container) the kubelet says holds the device. Never a
    guess: more than one left is AMBIGUOUS_CONTAINER."""
    candidates = set(owner.name_candidates)
    known = by_uid.get(owner.pod_uid)
    if known is not None:
        # Before the log directory: a pod that can write /var/log can rename the UID's
        # directory, but not change the API server's answer. None agreeing: every log name is
        # wrong, but the pod is still known by its UID.
        candidates = {c for c in candidates if c[:2] == known} or {(*known, "")}
    elif owner.pod:
        # Set by host_pids only where the directory names one of the candidates' pods.
        candidates = {c for c in candidates if c[:2] == (owner.namespace, owner.pod)}
    holding = {c for c in candidates if c[:2] in holders.pods}
    if len(holding) > 1:
        holding = (holding & holders.containers) or holding
    if not holding:
        return None, NOT_HOLDER
    if len(holding) > 1:
        return None, AMBIGUOUS_CONTAINER
    return holding.pop(), ""
