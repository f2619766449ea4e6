"""What a DRA device in a pod-resources answer refers to.

The kubelet reports a container's DRA devices by claim, each as (driver, pool, device name); the
GPU's UUID is not among them. NVIDIA's DRA driver (k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin)
names its devices after the GPU's minor number, so most can be traced to an NVML device without
the API server:

  gpu-<minor>                                          a whole GPU
  gpu-<minor>-mig-<profile>-<giProfileId>-<start>      a MIG device; <profile> is the MIG profile
                                                       name lowercased with dots removed and other
                                                       characters outside [a-z0-9-] made "-"
                                                       (1g.10gb -> 1g10gb, 1g.10gb+me -> 1g10gb-me)
  gpu-<minor>-mig-<giProfileId>-<start>-<size>         a MIG device, older releases

Anything else (the driver's vfio devices, a renamed device, another driver's devices) is not
guessed at: the ResourceSlice watch may still resolve it by its `uuid` attribute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The `driver_name` of NVIDIA's GPU DRA driver; its ComputeDomain driver
# (compute-domain.nvidia.com) hands out IMEX channels, not GPUs.
NVIDIA_GPU_DRIVER = "gpu.nvidia.com"


@dataclass(frozen=True, slots=True)
class DraDeviceName:
    """A device name in the NVIDIA DRA driver's convention."""

    minor: int
    # The MIG fields are None for a whole GPU; profile_slug is None in the older MIG form.
    mig: bool = False
    profile_slug: str | None = None
    gpu_instance_profile_id: int | None = None
    placement_start: int | None = None
    placement_size: int | None = None


_WHOLE = re.compile(r"^gpu-(\d{1,4})$")
_MIG_OLD = re.compile(r"^gpu-(\d{1,4})-mig-(\d{1,4})-(\d{1,3})-(\d{1,3})$")
_MIG = re.compile(r"^gpu-(\d{1,4})-mig-([a-z0-9][a-z0-9-]*)-(\d{1,4})-(\d{1,3})$")


def parse_dra_device_name(name: str) -> DraDeviceName | None:
    """The minor number and MIG placement named by `name`, or None when it is not one of the
    NVIDIA DRA driver's forms."""
    if match := _WHOLE.match(name):
        return DraDeviceName(int(match.group(1)))
    # The older form is all digits after "mig-"; checked first because the newer pattern would
    # also read it, with the profile ID taken for a profile name.
    if match := _MIG_OLD.match(name):
        minor, profile_id, start, size = (int(g) for g in match.groups())
        return DraDeviceName(
            minor,
            mig=True,
            gpu_instance_profile_id=profile_id,
            placement_start=start,
            placement_size=size,
        )
    if match := _MIG.match(name):
        return DraDeviceName(
            int(match.group(1)),
            mig=True,
            profile_slug=match.group(2),
            gpu_instance_profile_id=int(match.group(3)),
            placement_start=int(match.group(4)),
        )
    return None


def profile_slug(profile: str) -> str:
    """A MIG profile name as the driver writes it into device names: lowercase, dots dropped,
    anything but [a-z0-9-] turned into "-", no "-" at either end."""
    text = re.sub(r"[^a-z0-9-]", "-", profile.lower().replace(".", ""))
    return text.strip("-")
