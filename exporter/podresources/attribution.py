"""Joins pod-resources allocations with the NVML snapshot: which containers hold each GPU or MIG
instance. A device shared through replicas keeps every holder, never only the last one
(dcgm-exporter #307, #201)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from exporter.podresources.allocations import Allocation, PodResourcesSnapshot
from exporter.podresources.device_ids import DeviceKind, DeviceRef
from exporter.snapshot import NodeSnapshot

# (GPU UUID, GPU-instance id or None for the whole GPU)
DeviceKey = tuple[str, int | None]


@dataclass(frozen=True, slots=True)
class Holder:
    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str  # the device ID without its replica suffix
    replicas: int  # how many of the device's IDs (time-slicing or MPS replicas) this container has
    # The shares among those IDs (`2` of `GPU-...::2`, `1` of GKE's `nvidia0/vgpu1`), in
    # share_order; empty when the container holds the device itself rather than shares of it.
    shares: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Attribution:
    holders: dict[DeviceKey, tuple[Holder, ...]]
    # Allocations whose device is not on this node's NVML snapshot (e.g. a GPU that was lost).
    unresolved: tuple[Holder, ...]

    def for_device(self, uuid: str, gpu_instance_id: int | None) -> tuple[Holder, ...]:
        """Holders of a GPU instance include those holding its whole GPU (MIG strategy none)."""
        own = self.holders.get((uuid, gpu_instance_id), ())
        if gpu_instance_id is None:
            return own
        return own + self.holders.get((uuid, None), ())


EMPTY = Attribution({}, ())


def share_order(share: str) -> tuple[int, int, str]:
    """Numeric shares by number (`2` before `10`), anything else after them by text."""
    return (0, int(share), share) if share.isascii() and share.isdigit() else (1, 0, share)


@dataclass(frozen=True, slots=True)
class _DeviceIndex:
    """Lookups from the NVML snapshot, built once per join."""

    gpus: frozenset[str]
    mig: dict[str, DeviceKey]  # MIG UUID -> (parent GPU UUID, GI)
    by_index: dict[int, str]  # GPU index -> GPU UUID, for GKE's nvidiaN IDs

    @classmethod
    def of(cls, node: NodeSnapshot) -> _DeviceIndex:
        return cls(
            gpus=frozenset(g.identity.uuid for g in node.gpus if g.identity.uuid),
            mig={
                inst.uuid: (gpu.identity.uuid, inst.gpu_instance_id)
                for gpu in node.gpus
                for inst in gpu.mig_instances
            },
            by_index={g.identity.index: g.identity.uuid for g in node.gpus if g.identity.uuid},
        )


def resolve(allocation: Allocation, node: NodeSnapshot | _DeviceIndex) -> DeviceKey | None:
    return resolve_device(allocation.device, node)


def resolve_device(ref: DeviceRef, node: NodeSnapshot | _DeviceIndex) -> DeviceKey | None:
    index = node if isinstance(node, _DeviceIndex) else _DeviceIndex.of(node)
    if ref.kind is DeviceKind.GPU:
        return (ref.uuid, None) if ref.uuid in index.gpus else None
    if ref.kind is DeviceKind.MIG:
        return index.mig.get(ref.uuid)
    if ref.kind is DeviceKind.MIG_LEGACY:
        return ref.uuid, ref.gpu_instance_id
    if ref.kind in (DeviceKind.GKE_GPU, DeviceKind.GKE_MIG) and ref.index in index.by_index:
        return index.by_index[ref.index], ref.gpu_instance_id
    return None


def attribute(node: NodeSnapshot, pods: PodResourcesSnapshot | None) -> Attribution:
    """Which containers hold each device of `node`, from the kubelet's allocations.

    The device IDs a container got for one device are counted into one Holder, so a time-sliced
    GPU lists each sharing container once with its replica count. Allocations naming a device
    NVML does not show land in `unresolved` rather than being dropped. Holders come out sorted,
    so the exposition is stable from one scrape to the next. No pod-resources data (None) means
    no holders at all, not an error."""
    if pods is None:
        return EMPTY
    index = _DeviceIndex.of(node)
    # Per holding: how many IDs, and which shares among them.
    held: dict[tuple[DeviceKey | None, str, str, str, str, str], list[str | None]] = defaultdict(
        list
    )
    for allocation in pods.allocations:
        key = resolve(allocation, index)
        held[
            (
                key,
                allocation.namespace,
                allocation.pod,
                allocation.container,
                allocation.resource,
                allocation.device.device_key,
            )
        ].append(allocation.device.shared_id)
    holders: dict[DeviceKey, list[Holder]] = defaultdict(list)
    unresolved: list[Holder] = []
    for (key, namespace, pod, container, resource, device_id), ids in sorted(
        held.items(), key=lambda item: (str(item[0][0]), *item[0][1:])
    ):
        shares = tuple(sorted({s for s in ids if s is not None}, key=share_order))
        holder = Holder(namespace, pod, container, resource, device_id, len(ids), shares)
        if key is None:
            unresolved.append(holder)
        else:
            holders[key].append(holder)
    return Attribution({k: tuple(v) for k, v in holders.items()}, tuple(unresolved))


def allocatable_units(
    node: NodeSnapshot, pods: PodResourcesSnapshot | None
) -> dict[str, int] | None:
    """Allocatable device IDs per physical GPU UUID, every NVML-visible GPU included (0 when the
    device plugin offers nothing on it). A count, not a flag, because one GPU backs several IDs
    under time-slicing or MIG. None when the kubelet does not report allocatable devices."""
    if pods is None or pods.allocatable_devices is None:
        return None
    index = _DeviceIndex.of(node)
    units = dict.fromkeys(index.gpus, 0)
    for ref in pods.allocatable_devices:
        key = resolve_device(ref, index)
        if key is not None and key[0] in units:
            units[key[0]] += 1
    return units
