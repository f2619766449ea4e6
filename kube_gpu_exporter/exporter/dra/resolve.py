"""Which NVML device a DRA device of NVIDIA's GPU driver is, or why that cannot be told.

Two sources, in order:
1. This node's ResourceSlices (with --kubernetes): the driver's `uuid` attribute names a whole
   GPU or a MIG device exactly; a dynamic-MIG device, announced before it exists, has no `uuid`
   but a `parentUUID`, and is found on that parent by its placement.
2. The device name alone (names.py): `gpu-<minor>` through NVML's minor number, a MIG
   device through its parent's minor and its GPU instance's placement start. NVML shows a
   placement to privileged callers only; without it, a MIG device still resolves when exactly one
   live instance of its profile sits on that parent, and is reported ambiguous otherwise.

Except where they disagree on the GPU: anyone allowed to write ResourceSlices can publish one
that maps `gpu-0` to another GPU's UUID, and would move a pod's labels onto an idle GPU. A name
in the driver's convention whose minor NVML knows is NVML's to answer: the slice is overruled,
and the target says so (`slice_conflict`), to be counted under SLICE_CONFLICT. The slice still
decides which instance on that GPU a MIG device is, where NVML hides placements.

Nothing is guessed: a device that does not resolve gets a reason, counted by the attribution
join (kube_gpu_exporter/exporter/attribution/).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from kube_gpu_exporter.exporter.dra.names import (
    NVIDIA_GPU_DRIVER,
    DraDeviceName,
    parse_dra_device_name,
    profile_slug,
)
from kube_gpu_exporter.exporter.dra.slices import SliceDevice
from kube_gpu_exporter.exporter.snapshot import GpuSnapshot, MigInstance, NodeSnapshot

# Why a DRA device has no NVML device (the `reason` label).
FOREIGN_DRIVER = "foreign_driver"  # not NVIDIA's GPU driver: not a GPU we can tell anything of
UNKNOWN_NAME = "unknown_name"  # not the driver's naming convention, and no ResourceSlice for it
NO_SUCH_GPU = "no_such_gpu"  # the minor number or UUID is not on this node's NVML snapshot
NO_SUCH_MIG_INSTANCE = "no_such_mig_instance"  # the parent is here, no live instance matches
AMBIGUOUS_MIG_INSTANCE = "ambiguous_mig_instance"  # several instances fit; NVML hid placements
# A ResourceSlice puts the device on another GPU than its name's minor number: attributed as NVML
# says (DraTarget.slice_conflict), or unresolved when the name alone cannot tell the instance.
SLICE_CONFLICT = "slice_conflict"

SliceMap = Mapping[tuple[str, str], SliceDevice]


@dataclass(frozen=True, slots=True)
class DraTarget:
    """The NVML device a DRA device is: a whole GPU, or one GPU instance of it."""

    gpu_uuid: str
    gpu_instance_id: int | None = None
    mig_profile: str = ""
    mig_uuid: str = ""
    # A ResourceSlice named another GPU for this device; NVML's minor number was trusted.
    slice_conflict: bool = False


@dataclass(frozen=True, slots=True)
class DraDeviceInUse:
    """One distinct device of NVIDIA's GPU DRA driver that containers on this node use, as the
    kubelet's allocations (kube_gpu_exporter/exporter/podresources/attribution.py) give it."""

    pool: str
    device: str
    resource: str  # as the capacity families count it (dra_resource)
    # The (GPU UUID, GPU-instance id or None) it resolved to; None: no NVML device.
    key: tuple[str, int | None] | None


@dataclass(frozen=True, slots=True)
class DraIndex:
    """Lookups over one NVML snapshot and the slices known, built once per join."""

    by_minor: Mapping[int, GpuSnapshot]
    by_uuid: Mapping[str, GpuSnapshot]
    mig_by_uuid: Mapping[str, tuple[GpuSnapshot, MigInstance]]
    slices: SliceMap

    @classmethod
    def of(cls, node: NodeSnapshot, slices: SliceMap | None = None) -> DraIndex:
        gpus = [g for g in node.gpus if g.identity.uuid]
        return cls(
            by_minor={
                g.identity.minor_number: g for g in gpus if g.identity.minor_number is not None
            },
            by_uuid={g.identity.uuid: g for g in gpus},
            mig_by_uuid={inst.uuid: (g, inst) for g in gpus for inst in g.mig_instances},
            slices=slices or {},
        )


def _instance(gpu: GpuSnapshot, inst: MigInstance) -> DraTarget:
    return DraTarget(gpu.identity.uuid, inst.gpu_instance_id, inst.profile, inst.uuid)


def _by_placement(gpu: GpuSnapshot, name: DraDeviceName, slice_profile: str) -> DraTarget | str:
    """The live instance on `gpu` that the MIG device `name` describes."""
    instances = gpu.mig_instances
    if not instances:
        return NO_SUCH_MIG_INSTANCE

    def same_profile(inst: MigInstance) -> bool:
        if slice_profile:
            return inst.profile == slice_profile
        if name.profile_slug is not None:
            return profile_slug(inst.profile) == name.profile_slug
        # The older names carry only the GI profile ID.
        return inst.gpu_instance_profile_id in (None, name.gpu_instance_profile_id)

    if all(inst.placement_start is not None for inst in instances):
        placed = [
            inst
            for inst in instances
            if inst.placement_start == name.placement_start
            and name.gpu_instance_profile_id in (None, inst.gpu_instance_profile_id)
            and same_profile(inst)
        ]
        return _instance(gpu, placed[0]) if len(placed) == 1 else NO_SUCH_MIG_INSTANCE
    fitting = [inst for inst in instances if same_profile(inst)]
    if len(fitting) == 1:
        return _instance(gpu, fitting[0])
    return AMBIGUOUS_MIG_INSTANCE if fitting else NO_SUCH_MIG_INSTANCE


def _from_slice(
    device: SliceDevice, name: DraDeviceName | None, index: DraIndex
) -> DraTarget | str | None:
    """What the ResourceSlice says, or None when it says nothing usable (resolve by name then)."""
    if device.type == "gpu" and device.uuid:
        gpu = index.by_uuid.get(device.uuid)
        return DraTarget(device.uuid) if gpu is not None else NO_SUCH_GPU
    if device.type != "mig":
        return None
    if device.uuid:
        found = index.mig_by_uuid.get(device.uuid)
        if found is not None:
            return _instance(*found)
        # A MIG device the driver still announces but NVML no longer shows (MIG reconfigured).
        return NO_SUCH_MIG_INSTANCE if device.parent_uuid in index.by_uuid else NO_SUCH_GPU
    if not device.parent_uuid or name is None or not name.mig:
        return None
    parent = index.by_uuid.get(device.parent_uuid)
    if parent is None:
        return NO_SUCH_GPU
    return _by_placement(parent, name, device.profile)


def slice_gpu(device: SliceDevice, index: DraIndex) -> str:
    """The UUID of the physical GPU a ResourceSlice puts `device` on; empty when it names none."""
    if device.type == "gpu":
        return device.uuid
    if device.type != "mig":
        return ""
    found = index.mig_by_uuid.get(device.uuid) if device.uuid else None
    return found[0].identity.uuid if found is not None else device.parent_uuid


def named_gpu(name: DraDeviceName | None, index: DraIndex) -> GpuSnapshot | None:
    """The GPU NVML gives the minor number of a name in the driver's convention."""
    return None if name is None else index.by_minor.get(name.minor)


def _by_name(gpu: GpuSnapshot, name: DraDeviceName) -> DraTarget | str:
    return DraTarget(gpu.identity.uuid) if not name.mig else _by_placement(gpu, name, "")


def resolve_dra_device(driver: str, pool: str, device: str, index: DraIndex) -> DraTarget | str:
    """The NVML device behind (driver, pool, device), or the reason there is none."""
    if driver != NVIDIA_GPU_DRIVER:
        return FOREIGN_DRIVER
    name = parse_dra_device_name(device)
    gpu = named_gpu(name, index)
    announced = index.slices.get((pool, device))
    if announced is not None:
        placed_on = slice_gpu(announced, index)
        if gpu is not None and name is not None and placed_on not in ("", gpu.identity.uuid):
            by_name = _by_name(gpu, name)
            if isinstance(by_name, DraTarget):
                return replace(by_name, slice_conflict=True)
            return SLICE_CONFLICT
        found = _from_slice(announced, name, index)
        if found is not None:
            return found
    if name is None:
        return UNKNOWN_NAME
    if gpu is None:
        return NO_SUCH_GPU
    return _by_name(gpu, name)


def dra_resource(driver: str, target: DraTarget | None, announced: SliceDevice | None) -> str:
    """The `resource` a DRA device counts under in the capacity families: the driver for a
    whole GPU, `<driver>/mig-<profile>` for a MIG device, as the device plugin's mixed strategy
    names its MIG resources `nvidia.com/mig-<profile>`."""
    profile = ""
    if target is not None and target.gpu_instance_id is not None:
        profile = target.mig_profile
    elif announced is not None and announced.type == "mig":
        profile = announced.profile
    return f"{driver}/mig-{profile}" if profile else driver
