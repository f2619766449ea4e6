"""Joins pod-resources allocations with the NVML snapshot: which containers hold each GPU or MIG
instance. A device shared through replicas keeps every holder, never only the last one
(dcgm-exporter #307, #201)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace

from kube_gpu_exporter.exporter.dra.names import NVIDIA_GPU_DRIVER
from kube_gpu_exporter.exporter.dra.resolve import (
    FOREIGN_DRIVER,
    SLICE_CONFLICT,
    DraDeviceInUse,
    DraIndex,
    DraTarget,
    SliceMap,
    dra_resource,
    resolve_dra_device,
)
from kube_gpu_exporter.exporter.podresources.allocations import (
    Allocation,
    DraAllocation,
    PodResourcesSnapshot,
)
from kube_gpu_exporter.exporter.podresources.device_ids import DeviceKind, DeviceRef
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot

# (GPU UUID, GPU-instance id or None for the whole GPU)
DeviceKey = tuple[str, int | None]


@dataclass(frozen=True, slots=True)
class DraClaimDevice:
    """How a holder got its device through DRA: the claim, and the device as the kubelet named
    it. dcgm-exporter's DRA mode spells these as its `dra_*` labels."""

    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str
    share_id: str | None = None
    # For a MIG device: its profile and its UUID, where known (a dynamic-MIG device announced
    # without a `uuid` still gets the UUID NVML shows for the instance it resolved to).
    mig_profile: str = ""
    mig_uuid: str = ""


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
    # Set for a device held through a DRA claim: then `resource` is the driver's name and
    # `device_id` the DRA device name.
    dra: DraClaimDevice | None = None


@dataclass(frozen=True, slots=True)
class Attribution:
    holders: dict[DeviceKey, tuple[Holder, ...]]
    # Allocations whose device is not on this node's NVML snapshot (e.g. a GPU that was lost).
    unresolved: tuple[Holder, ...]
    # NVIDIA GPU DRA devices in use, each once however many claims share it.
    dra_in_use: tuple[DraDeviceInUse, ...] = ()
    # ((driver, reason), DRA devices of running containers that name no NVML device), sorted.
    dra_unresolved: tuple[tuple[tuple[str, str], int], ...] = ()

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


def attribute(
    node: NodeSnapshot, pods: PodResourcesSnapshot | None, slices: SliceMap | None = None
) -> Attribution:
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
    found: list[tuple[DeviceKey | None, Holder]] = []
    for (key, namespace, pod, container, resource, device_id), ids in held.items():
        shares = tuple(sorted({s for s in ids if s is not None}, key=share_order))
        found.append(
            (key, Holder(namespace, pod, container, resource, device_id, len(ids), shares))
        )
    dra_holders, in_use, dra_unresolved = _dra_holders(pods.dra_allocations, node, slices)
    found.extend(dra_holders)
    holders: dict[DeviceKey, list[Holder]] = defaultdict(list)
    unresolved: list[Holder] = []
    for key, holder in sorted(found, key=_holder_order):
        if key is None:
            unresolved.append(holder)
        else:
            holders[key].append(holder)
    return Attribution(
        {k: tuple(v) for k, v in holders.items()},
        tuple(unresolved),
        in_use,
        dra_unresolved,
    )


def _holder_order(item: tuple[DeviceKey | None, Holder]) -> tuple[object, ...]:
    key, h = item
    claim = (
        ("", "", "", "")
        if h.dra is None
        else (h.dra.claim_namespace, h.dra.claim_name, h.dra.pool, h.dra.device)
    )
    return (str(key), h.namespace, h.pod, h.container, h.resource, h.device_id, *claim)


def _dra_holders(
    allocations: tuple[DraAllocation, ...], node: NodeSnapshot, slices: SliceMap | None
) -> tuple[
    list[tuple[DeviceKey | None, Holder]],
    tuple[DraDeviceInUse, ...],
    tuple[tuple[tuple[str, str], int], ...],
]:
    """Holders of DRA devices, one per (container, claim, device); the distinct NVIDIA GPU
    devices in use; and how many devices resolved to nothing, by driver and reason."""
    if not allocations:
        return [], (), ()
    index = DraIndex.of(node, slices)
    results: dict[tuple[str, str, str], DraTarget | str] = {}
    holders: dict[tuple[object, ...], tuple[DeviceKey | None, Holder]] = {}
    for a in allocations:
        address = (a.driver, a.pool, a.device)
        if address not in results:
            results[address] = resolve_dra_device(a.driver, a.pool, a.device, index)
        target = results[address]
        if target == FOREIGN_DRIVER:
            continue
        key: DeviceKey | None = None
        claim = DraClaimDevice(
            a.claim_name, a.claim_namespace, a.driver, a.pool, a.device, a.share_id
        )
        if isinstance(target, DraTarget):
            key = (target.gpu_uuid, target.gpu_instance_id)
            if target.gpu_instance_id is not None:
                claim = replace(claim, mig_profile=target.mig_profile, mig_uuid=target.mig_uuid)
        holding = (
            a.namespace,
            a.pod,
            a.container,
            a.claim_namespace,
            a.claim_name,
            *address,
            a.share_id,
        )
        if holding in holders:
            continue  # the kubelet listed the same device of the same claim twice
        holders[holding] = (
            key,
            Holder(a.namespace, a.pod, a.container, a.driver, a.device, 1, (), claim),
        )
    unresolved: Counter[tuple[str, str]] = Counter()
    in_use: list[DraDeviceInUse] = []
    for (driver, pool, device), target in sorted(results.items()):
        if isinstance(target, str):
            unresolved[(driver, target)] += 1
        elif target.slice_conflict:
            unresolved[(driver, SLICE_CONFLICT)] += 1
        if driver != NVIDIA_GPU_DRIVER:
            continue
        resolved = target if isinstance(target, DraTarget) else None
        in_use.append(
            DraDeviceInUse(
                pool,
                device,
                dra_resource(driver, resolved, index.slices.get((pool, device))),
                None if resolved is None else (resolved.gpu_uuid, resolved.gpu_instance_id),
            )
        )
    return list(holders.values()), tuple(in_use), tuple(sorted(unresolved.items()))


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
