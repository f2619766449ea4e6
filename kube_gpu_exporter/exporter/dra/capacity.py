"""What DRA adds to the node's GPU capacity figures: devices NVIDIA's GPU driver has handed out,
devices it offers, and how many of them each physical GPU backs.

Offers come only from the ResourceSlice watch; the kubelet's GetAllocatableResources lists
device-plugin devices alone. Without the watch, a GPU held through DRA still counts as offered
(it was, to be allocated), but a free one cannot be told from a GPU nobody offers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from kube_gpu_exporter.exporter.dra.names import NVIDIA_GPU_DRIVER, parse_dra_device_name
from kube_gpu_exporter.exporter.dra.resolve import (
    DraDeviceInUse,
    DraIndex,
    SliceMap,
    dra_resource,
    named_gpu,
    slice_gpu,
)
from kube_gpu_exporter.exporter.dra.slices import SliceDevice


def dra_allocated(in_use: Iterable[DraDeviceInUse]) -> Counter[str]:
    """resource -> NVIDIA GPU DRA devices in use (the attribution's `dra_in_use`, where a device
    several claims share is listed once)."""
    return Counter(device.resource for device in in_use)


def dra_allocatable(slices: SliceMap) -> Counter[str]:
    """resource -> devices this node's ResourceSlices offer, tainted ones left out."""
    return Counter(
        dra_resource(NVIDIA_GPU_DRIVER, None, device)
        for device in slices.values()
        if device.type in ("gpu", "mig") and not device.tainted
    )


def _offering_gpu(device: SliceDevice, index: DraIndex) -> str | None:
    """The physical GPU an offered device lives on, whether or not its MIG instance exists yet:
    the one NVML gives its name's minor number, as attribution trusts that over the slice
    (resolve.py), else the one the slice names."""
    named = named_gpu(parse_dra_device_name(device.name), index)
    if named is not None:
        return named.identity.uuid
    placed_on = slice_gpu(device, index)
    return placed_on if placed_on in index.by_uuid else None


def dra_units(
    index: DraIndex, in_use: Iterable[DraDeviceInUse], slices_synced: bool
) -> Counter[str]:
    """GPU UUID -> DRA devices offered on it: from the slices when the watch is synced (an
    untainted device), else the devices held on it."""
    units: Counter[str] = Counter()
    if slices_synced:
        for device in index.slices.values():
            if device.tainted:
                continue  # the driver's health check marked it: not offered
            gpu = _offering_gpu(device, index)
            if gpu is not None:
                units[gpu] += 1
        return units
    for held in in_use:
        if held.key is not None:
            units[held.key[0]] += 1
    return units
