"""What a device ID in a pod-resources response refers to.

NVIDIA's device plugin hands out these forms (k8s-device-plugin internal/rm):
  GPU-<uuid>                  a whole GPU
  MIG-<uuid>                  a MIG device; its parent and GI come from the NVML snapshot
  MIG-GPU-<uuid>/<gi>/<ci>    a MIG device, legacy drivers (R450/R460)
  <any of the above>::<n>     replica n of a time-sliced or MPS-shared device
GKE's plugin uses nvidia<N>, nvidia<N>/gi<M> and nvidia<N>/vgpu<K>.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class DeviceKind(StrEnum):
    GPU = "gpu"  # identified by GPU UUID
    MIG = "mig"  # identified by MIG UUID
    MIG_LEGACY = "mig_legacy"  # parent GPU UUID + GI + CI
    GKE_GPU = "gke_gpu"  # identified by index
    GKE_MIG = "gke_mig"  # index + GI
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class DeviceRef:
    raw: str
    kind: DeviceKind
    uuid: str = ""  # GPU UUID, MIG UUID, or the parent UUID for MIG_LEGACY
    index: int | None = None  # GKE forms
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    replica: int | None = None

    @property
    def device_key(self) -> str:
        """The physical device this ID points at, replicas folded together."""
        base = self.raw.split("::", 1)[0]
        if self.kind in (DeviceKind.GKE_GPU, DeviceKind.GKE_MIG):
            return base.split(_GKE_VGPU, 1)[0]
        return base

    @property
    def shared_id(self) -> str | None:
        """Which share of a shared device this ID is, as dcgm-exporter's `vgpu` label spells it:
        the text after GKE's "/vgpu", else after "::" (up to a further "::"); None for an ID
        that is not a share."""
        if _GKE_VGPU in self.raw:
            return self.raw.split(_GKE_VGPU)[1]
        if "::" in self.raw:
            return self.raw.split("::")[1]
        return None


_GKE_VGPU = "/vgpu"
_LEGACY_MIG = re.compile(r"^MIG-(GPU-[0-9a-fA-F-]+)/(\d+)/(\d+)$")
_GKE = re.compile(r"^nvidia(\d+)(?:/gi(\d+))?(?:/vgpu(\d+))?$")


def parse_device_id(raw: str) -> DeviceRef:
    base, sep, suffix = raw.partition("::")
    replica = int(suffix) if sep and suffix.isdigit() else None
    if match := _LEGACY_MIG.match(base):
        return DeviceRef(
            raw,
            DeviceKind.MIG_LEGACY,
            uuid=match.group(1),
            gpu_instance_id=int(match.group(2)),
            compute_instance_id=int(match.group(3)),
            replica=replica,
        )
    if base.startswith("GPU-"):
        return DeviceRef(raw, DeviceKind.GPU, uuid=base, replica=replica)
    if base.startswith("MIG-"):
        return DeviceRef(raw, DeviceKind.MIG, uuid=base, replica=replica)
    if match := _GKE.match(base):
        index, gi, vgpu = match.groups()
        return DeviceRef(
            raw,
            DeviceKind.GKE_MIG if gi else DeviceKind.GKE_GPU,
            index=int(index),
            gpu_instance_id=int(gi) if gi else None,
            replica=int(vgpu) if vgpu else replica,
        )
    return DeviceRef(raw, DeviceKind.UNKNOWN, replica=replica)


GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def is_gpu_resource(resource: str, extra: frozenset[str] = frozenset()) -> bool:
    """Resources that hand out NVIDIA devices (both MIG strategies), plus names given by flag."""
    return (
        resource in GPU_RESOURCES or resource.startswith(MIG_RESOURCE_PREFIX) or (resource in extra)
    )
