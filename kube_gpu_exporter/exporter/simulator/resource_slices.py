"""What NVIDIA's GPU DRA driver (k8s-dra-driver-gpu, its gpu-kubelet-plugin) would announce for the
simulated node: the names of its devices, which the fake kubelet reports in claims, and the
ResourceSlice objects, as JSON dicts the way the API server serves them.

Only GPUs whose fleet entry says `allocation: dra` are the driver's. A whole GPU is offered as
`gpu-<minor>`; a MIG-enabled GPU offers each live MIG instance and not itself. Two naming formats
exist: "current" (releases from 25.12) names MIG devices `gpu-<minor>-mig-<profile>-<giProfileId>-
<placementStart>`; "legacy" (25.3 and 25.8) names them `gpu-<minor>-mig-<giProfileId>-<start>-
<size>` and announces, as 25.3 did, the integer attributes `minor` and `index`. Device taints for
unhealthy GPUs are not modelled.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

from kube_gpu_exporter.exporter.dra.names import NVIDIA_GPU_DRIVER, profile_slug
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec
from kube_gpu_exporter.exporter.simulator.gpu_models import (
    ARCH_ADA,
    ARCH_AMPERE,
    ARCH_HOPPER,
    ARCH_TURING,
)
from kube_gpu_exporter.exporter.simulator.sim_gpu import MIB, SimGpu, SimMigInstance, stable_uuid

API_VERSIONS = ("v1", "v1beta2", "v1beta1")
NAME_FORMATS = ("current", "legacy")
# The API's limit on devices in one ResourceSlice; a bigger pool is split over several.
MAX_DEVICES_PER_SLICE = 128
# The standard attribute Kubernetes' deviceattribute package defines for a PCI address.
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
_ARCHITECTURES = {
    ARCH_TURING: "Turing",
    ARCH_AMPERE: "Ampere",
    ARCH_ADA: "Ada Lovelace",
    ARCH_HOPPER: "Hopper",
}
# What FakeNvml's nvmlSystemGetCudaDriverVersion answers (12040), as the driver formats it.
_CUDA_DRIVER_VERSION = "12.4.0"

DraDevice = tuple[SimGpu, SimMigInstance | None]


def is_dra(gpu: SimGpu) -> bool:
    return gpu.spec.allocation == "dra"


def minor_number(gpu: SimGpu) -> int:
    """The GPU's /dev/nvidia<minor>: FakeNvml answers nvmlDeviceGetMinorNumber with the index."""
    return gpu.index


def device_name(gpu: SimGpu, instance: SimMigInstance | None, name_format: str = "current") -> str:
    if instance is None:
        return f"gpu-{minor_number(gpu)}"
    # The GI profile ID and placement are what nvmlGpuInstanceGetInfo reports for the instance.
    if name_format == "legacy":
        return (
            f"gpu-{minor_number(gpu)}-mig-{instance.profile_id}-{instance.placement_start}"
            f"-{instance.placement_size}"
        )
    return (
        f"gpu-{minor_number(gpu)}-mig-{profile_slug(instance.profile_name)}"
        f"-{instance.profile_id}-{instance.placement_start}"
    )


def offered_devices(nvml: FakeNvml, name_format: str = "current") -> dict[str, DraDevice]:
    """Every device the driver offers on this node, by name, in announcement order."""
    if name_format not in NAME_FORMATS:
        raise ValueError(f"unknown DRA device name format {name_format!r}")
    devices: dict[str, DraDevice] = {}
    for gpu in nvml.gpus:
        if not is_dra(gpu):
            continue
        if gpu.mig_enabled:
            for instance in gpu.live_instances():
                devices[device_name(gpu, instance, name_format)] = (gpu, instance)
        else:
            devices[device_name(gpu, None, name_format)] = (gpu, None)
    return devices


def multi_allocation_gpus(nvml: FakeNvml) -> tuple[SimGpu, ...]:
    """The DRA GPUs that several claims may hold at once (Kubernetes 1.34+ consumable capacity,
    `allowMultipleAllocations`): the first whole-GPU inference one, which the fake kubelet
    hands to two claims."""
    first = next(
        (
            g
            for g in nvml.gpus
            if is_dra(g) and not g.mig_enabled and g.spec.workload == "inference"
        ),
        None,
    )
    return () if first is None else (first,)


def resource_slices(
    nvml: FakeNvml, api_version: str = "v1", name_format: str = "current"
) -> list[dict[str, Any]]:
    """The node's ResourceSlices of driver gpu.nvidia.com; none when no GPU is the driver's."""
    if api_version not in API_VERSIONS:
        raise ValueError(f"unknown resource.k8s.io version {api_version!r}")
    fleet = nvml.fleet
    node = fleet.node_name
    shared = {g.uuid for g in multi_allocation_gpus(nvml)}
    devices = [
        _device(gpu, instance, name, name_format, api_version, gpu.uuid in shared, fleet)
        for name, (gpu, instance) in offered_devices(nvml, name_format).items()
    ]
    chunks = list(_chunks(devices, MAX_DEVICES_PER_SLICE))
    return [
        {
            "apiVersion": f"resource.k8s.io/{api_version}",
            "kind": "ResourceSlice",
            "metadata": {
                # The driver's library asks for generateName "<node>-<driver>-".
                "name": f"{node}-{NVIDIA_GPU_DRIVER}-{_suffix(fleet.seed, node, i)}",
                "uid": stable_uuid(fleet.seed, "resourceslice", node, i),
                "resourceVersion": str(1000 + i),
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": node,
                        "uid": stable_uuid(fleet.seed, "node", node),
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "driver": NVIDIA_GPU_DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": len(chunks)},
                "devices": chunk,
            },
        }
        for i, chunk in enumerate(chunks)
    ]


def _device(
    gpu: SimGpu,
    instance: SimMigInstance | None,
    name: str,
    name_format: str,
    api_version: str,
    shared: bool,
    fleet: FleetSpec,
) -> dict[str, Any]:
    attributes = _attributes(gpu, instance, name_format, fleet.driver_version)
    capacity = _capacity(gpu, instance)
    body: dict[str, Any] = {"attributes": attributes, "capacity": capacity}
    if shared:
        body["allowMultipleAllocations"] = True
    if api_version == "v1beta1":
        return {"name": name, "basic": body}
    return {"name": name, **body}


def _attributes(
    gpu: SimGpu, instance: SimMigInstance | None, name_format: str, driver_version: str
) -> dict[str, dict[str, Any]]:
    attributes: dict[str, dict[str, Any]] = {"type": _string("gpu" if instance is None else "mig")}
    attributes["uuid"] = _string(gpu.uuid if instance is None else instance.uuid)
    if instance is not None:
        attributes["parentUUID"] = _string(gpu.uuid)
        attributes["profile"] = _string(instance.profile_name)
    if name_format == "legacy":
        if instance is None:
            attributes["minor"] = {"int": minor_number(gpu)}
            attributes["index"] = {"int": gpu.index}
        else:
            attributes["index"] = {"int": instance.slot}
            attributes["parentIndex"] = {"int": gpu.index}
    major, minor = gpu.model.compute_capability
    attributes.update(
        {
            "productName": _string(gpu.model.name),
            "brand": _string("Nvidia"),
            "architecture": _string(_ARCHITECTURES.get(gpu.model.architecture, "Unknown")),
            "cudaComputeCapability": {"version": f"{major}.{minor}.0"},
            "driverVersion": {"version": driver_version},
            "cudaDriverVersion": {"version": _CUDA_DRIVER_VERSION},
        }
    )
    bus_id = gpu.pci_bus_id[4:].lower()  # the domain in four digits, as sysfs spells it
    if name_format == "legacy":
        attributes["pcieBusID"] = _string(bus_id)
    else:
        attributes[PCI_BUS_ID_ATTRIBUTE] = _string(bus_id)
    return attributes


def _capacity(gpu: SimGpu, instance: SimMigInstance | None) -> dict[str, dict[str, str]]:
    if instance is None:
        return {"memory": {"value": _bytes_quantity(gpu.model.memory_mib * MIB)}}
    capacity = {
        "multiprocessors": {"value": str(instance.multiprocessors)},
        "memory": {"value": _bytes_quantity(instance.memory_mib * MIB)},
    }
    start = instance.placement_start
    for memory_slice in range(start, start + instance.placement_size):
        capacity[f"memorySlice{memory_slice}"] = {"value": "1"}
    return capacity


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def _bytes_quantity(count: int) -> str:
    """A byte count in Kubernetes' canonical binary-SI form (the largest exact suffix)."""
    for suffix, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if count % size == 0:
            return f"{count // size}{suffix}"
    return str(count)


def _chunks(items: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _suffix(seed: int, *parts: object) -> str:
    """Five characters standing in for the API server's random generateName suffix."""
    value = zlib.crc32(repr((seed, *parts)).encode())
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the API server's: no vowels, no look-alikes
    out = ""
    for _ in range(5):
        value, rest = divmod(value, len(alphabet))
        out += alphabet[rest]
    return out
