"""Turns pod-resources responses into an immutable PodResourcesSnapshot: who holds which device,
and how many devices of each resource the node can allocate and has allocated."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from kube_gpu_exporter.exporter.podresources.device_ids import (
    DeviceRef,
    is_gpu_resource,
    parse_device_id,
)
from kube_gpu_exporter.exporter.podresources.v1 import api_pb2


@dataclass(frozen=True, slots=True)
class Allocation:
    namespace: str
    pod: str
    container: str
    resource: str
    device: DeviceRef


@dataclass(frozen=True, slots=True)
class DraAllocation:
    """One device of one DRA claim that a container uses, as the kubelet lists it."""

    namespace: str
    pod: str
    container: str
    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str
    # Kubernetes 1.35+: set when the device is allocated to several claims at once (a
    # consumable-capacity share); None when the kubelet does not say.
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PodResourcesSnapshot:
    allocations: tuple[Allocation, ...]
    # resource -> device IDs the kubelet can hand out (healthy devices only); None when the kubelet
    # does not offer GetAllocatableResources (before Kubernetes 1.21).
    allocatable: tuple[tuple[str, int], ...] | None
    # resource -> device IDs held by active pods.
    allocated: tuple[tuple[str, int], ...]
    taken_at: float
    # Every allocatable device ID, parsed, so each can be traced to its physical GPU; None as above.
    allocatable_devices: tuple[DeviceRef, ...] | None = None
    # Every DRA device a container uses, of any driver, in answer order.
    dra_allocations: tuple[DraAllocation, ...] = ()


def count_devices(
    devices: Iterable[api_pb2.ContainerDevices], extra: frozenset[str]
) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for entry in devices:
        if is_gpu_resource(entry.resource_name, extra):
            counts[entry.resource_name] += len(entry.device_ids)
    return dict(counts)


def from_responses(
    listing: api_pb2.ListPodResourcesResponse,
    allocatable: api_pb2.AllocatableResourcesResponse | None,
    extra_resources: frozenset[str],
    taken_at: float,
) -> PodResourcesSnapshot:
    allocations: list[Allocation] = []
    dra: list[DraAllocation] = []
    allocated: Counter[str] = Counter()
    for pod in listing.pod_resources:
        for container in pod.containers:
            for claim in container.dynamic_resources:
                for device in claim.claim_resources:
                    dra.append(
                        DraAllocation(
                            pod.namespace,
                            pod.name,
                            container.name,
                            claim.claim_name,
                            claim.claim_namespace,
                            device.driver_name,
                            device.pool_name,
                            device.device_name,
                            device.share_id if device.HasField("share_id") else None,
                        )
                    )
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name, extra_resources):
                    continue
                allocated[devices.resource_name] += len(devices.device_ids)
                for device_id in devices.device_ids:
                    allocations.append(
                        Allocation(
                            pod.namespace,
                            pod.name,
                            container.name,
                            devices.resource_name,
                            parse_device_id(device_id),
                        )
                    )
    capacity = None
    offered = None
    if allocatable is not None:
        capacity = tuple(sorted(count_devices(allocatable.devices, extra_resources).items()))
        offered = tuple(
            parse_device_id(device_id)
            for entry in allocatable.devices
            if is_gpu_resource(entry.resource_name, extra_resources)
            for device_id in entry.device_ids
        )
    return PodResourcesSnapshot(
        allocations=tuple(allocations),
        allocatable=capacity,
        allocated=tuple(sorted(allocated.items())),
        taken_at=taken_at,
        allocatable_devices=offered,
        dra_allocations=tuple(dra),
    )
