"""What this node's ResourceSlices offer: NVIDIA GPU DRA devices and the attributes that tie each to
an NVML device.

The objects come from the API server, but any DRA driver on the cluster writes them, so nothing in
them is trusted: a field of the wrong type, or a list far longer than the API's own limits, is
skipped or cut short here instead of raising inside the watch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kube_gpu_exporter.exporter.dra.names import NVIDIA_GPU_DRIVER

# The API allows 128 devices per slice (v1); a few times that leaves room for future limits while
# still bounding what one object can cost.
MAX_DEVICES_PER_SLICE = 1024
# A node's GPU driver publishes one slice per pool, and a second one only while republishing.
MAX_SLICES_PER_NODE = 128
# Object and pool names are DNS subdomains (at most 253 characters); attribute strings are
# limited to 64 by the API. Anything longer is not a value any driver wrote.
MAX_TEXT = 253


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device a ResourceSlice of NVIDIA's GPU DRA driver announces."""

    pool: str
    name: str
    # The driver's `type` attribute: "gpu" or "mig" (other values are kept, and not resolved).
    type: str
    # `uuid`: the GPU's or MIG device's UUID; empty for a dynamic-MIG device not yet created.
    uuid: str = ""
    # `parentUUID` and `profile`: MIG devices only.
    parent_uuid: str = ""
    profile: str = ""
    # A NoSchedule or NoExecute device taint: the driver's health check taints a GPU after a
    # fatal XID or when it falls off the bus, instead of withdrawing it; it is not offered then.
    tainted: bool = False


@dataclass(frozen=True, slots=True)
class ParsedSlice:
    """The parts of one ResourceSlice object the exporter reads."""

    name: str  # metadata.name, which keys the object in a watch
    driver: str
    pool: str
    generation: int
    devices: tuple[SliceDevice, ...]


AttributeValue = str | int | bool


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_TEXT else None


def object_name(obj: object) -> str | None:
    """metadata.name of an API object, when it has a usable one."""
    if not isinstance(obj, Mapping):
        return None
    metadata = obj.get("metadata")
    return _text(metadata.get("name")) if isinstance(metadata, Mapping) else None


def attribute_value(
    attributes: Mapping[str, object], driver: str, key: str
) -> AttributeValue | None:
    """A device attribute's value, under its bare name or qualified with the driver's domain;
    None when absent or not one of the one-of forms this reads."""
    for name in (key, f"{driver}/{key}"):
        value = attributes.get(name)
        if not isinstance(value, Mapping):
            continue
        for kind in ("string", "version"):
            text = value.get(kind)
            if isinstance(text, str) and len(text) <= MAX_TEXT:
                return text
        number = value.get("int")
        # bool is an int to Python; JSON's true is no number.
        if isinstance(number, int) and not isinstance(number, bool):
            return number
        flag = value.get("bool")
        if isinstance(flag, bool):
            return flag
    return None


def _string_attribute(attributes: Mapping[str, object], driver: str, key: str) -> str:
    value = attribute_value(attributes, driver, key)
    return value if isinstance(value, str) else ""


def _device(entry: object, driver: str, pool: str) -> SliceDevice | None:
    if not isinstance(entry, Mapping):
        return None
    name = _text(entry.get("name"))
    if name is None:
        return None
    # v1beta1 nests the attributes under `basic`; v1beta2 and v1 have them on the device.
    basic = entry.get("basic")
    source = basic if isinstance(basic, Mapping) else entry
    attributes = source.get("attributes")
    if not isinstance(attributes, Mapping):
        attributes = {}
    return SliceDevice(
        pool=pool,
        name=name,
        type=_string_attribute(attributes, driver, "type"),
        uuid=_string_attribute(attributes, driver, "uuid"),
        parent_uuid=_string_attribute(attributes, driver, "parentUUID"),
        profile=_string_attribute(attributes, driver, "profile"),
        tainted=_blocking_taint(source.get("taints")),
    )


_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
MAX_TAINTS = 64


def _blocking_taint(taints: object) -> bool:
    """Whether a device's taints keep pods without a toleration from being allocated it."""
    if not isinstance(taints, list):
        return False
    return any(
        isinstance(taint, Mapping) and taint.get("effect") in _BLOCKING_EFFECTS
        for taint in taints[:MAX_TAINTS]
    )


def parse_resource_slice(obj: object) -> ParsedSlice | None:
    """One ResourceSlice (resource.k8s.io v1, v1beta2 or v1beta1, as the API's JSON), or None when
    it lacks a name, driver, pool name or integer generation. Malformed devices are left out."""
    name = object_name(obj)
    if name is None or not isinstance(obj, Mapping):
        return None
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return None
    driver = _text(spec.get("driver"))
    pool = spec.get("pool")
    if driver is None or not isinstance(pool, Mapping):
        return None
    pool_name = _text(pool.get("name"))
    generation = pool.get("generation")
    if pool_name is None or not isinstance(generation, int) or isinstance(generation, bool):
        return None
    entries = spec.get("devices")
    devices: list[SliceDevice] = []
    if isinstance(entries, list):
        for entry in entries[:MAX_DEVICES_PER_SLICE]:
            device = _device(entry, driver, pool_name)
            if device is not None:
                devices.append(device)
    return ParsedSlice(name, driver, pool_name, generation, tuple(devices))


def offered_devices(
    slices: Iterable[ParsedSlice],
) -> Mapping[tuple[str, str], SliceDevice]:
    """The NVIDIA GPU devices the slices offer, by (pool, device name).

    While a driver republishes a pool it writes the new generation's slices before deleting the
    old ones; only the newest generation of each pool counts, so a device is never offered twice
    or offered after it left. At most MAX_SLICES_PER_NODE slices are read, in name order, and a
    device announced twice in a pool keeps its first announcement in that order.
    """
    ours = sorted((s for s in slices if s.driver == NVIDIA_GPU_DRIVER), key=lambda s: s.name)
    ours = ours[:MAX_SLICES_PER_NODE]
    newest: dict[str, int] = {}
    for piece in ours:
        newest[piece.pool] = max(newest.get(piece.pool, piece.generation), piece.generation)
    devices: dict[tuple[str, str], SliceDevice] = {}
    for piece in ours:
        if piece.generation == newest[piece.pool]:
            for device in piece.devices:
                devices.setdefault((device.pool, device.name), device)
    return MappingProxyType(devices)
