"""A snapshot's DCGM entities and device label sets before any pod is joined: all that a node
without pods renders, and what the join adds pod labels to.

dcgm-exporter's default "flex" mode monitors a MIG-enabled GPU only through its GPU instances, and
a plain GPU as a whole. Each instance repeats its parent's `gpu`, `UUID`, `pci_bus_id`, `device`
and `modelName`, adds `GPU_I_PROFILE` and `GPU_I_ID`, carries its own framebuffer figures and
repeats the board-level ones (temperature, power, clocks). Utilization does not exist on MIG;
GPM's profiling metrics do, per instance, on Hopper and newer.
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.attribution.model import AttributedNode, Entity, Labels
from kube_gpu_exporter.exporter.config import HostLabel, LabelConfig
from kube_gpu_exporter.exporter.snapshot import (
    FB_FREE,
    FB_RESERVED,
    FB_TOTAL,
    FB_USED,
    UTILIZATION,
    GpuIdentity,
    GpuReadings,
    NodeSnapshot,
    XidRecord,
)

# (GPU UUID, GPU-instance id or None for the whole GPU)
DeviceKey = tuple[str, int | None]

# The part a join that fails as a whole is counted under: the node is served without pods.
POD_JOIN = "pod join"


def host_labels(config: LabelConfig) -> Labels:
    if config.host_label is HostLabel.NONE:
        return ()
    return ((config.host_label.value, config.node_name),)


def device_labels(identity: GpuIdentity, config: LabelConfig) -> Labels:
    """The snake_case-safe device labels our own per-device metrics carry (no `modelName`)."""
    return (
        ("gpu", str(identity.index)),
        ("UUID", identity.uuid),
        ("pci_bus_id", identity.pci_bus_id),
        ("device", identity.device),
        *host_labels(config),
    )


def device_key_labels(snapshot: NodeSnapshot, key: DeviceKey) -> Labels:
    """`gpu` and `UUID`, plus `GPU_I_PROFILE` and `GPU_I_ID` for a GPU instance."""
    uuid, gi = key
    gpu = next((g for g in snapshot.gpus if g.identity.uuid == uuid), None)
    labels: Labels = (("gpu", str(gpu.identity.index) if gpu else ""), ("UUID", uuid))
    if gi is not None:
        profile = ""
        if gpu is not None:
            profile = next((m.profile for m in gpu.mig_instances if m.gpu_instance_id == gi), "")
        labels += (("GPU_I_PROFILE", profile), ("GPU_I_ID", str(gi)))
    return labels


def container_labels(device: Labels, key: tuple[str, str, str]) -> Labels:
    """A device's labels, then one container's (namespace, pod, container): the label set of the
    per-pod usage and energy rows, whose empty container is the device's unattributed row."""
    namespace, pod, container = key
    return (*device, ("namespace", namespace), ("pod", pod), ("container", container))


def merge_xid(board: XidRecord, instance: XidRecord) -> XidRecord:
    """An instance sees XIDs raised for it and the unattributed ones of its board."""
    if not instance.counts:
        return board
    if not board.counts:
        return instance
    newest = board if board.sequence >= instance.sequence else instance
    return XidRecord(
        newest.last_xid,
        newest.sequence,
        _summed(board.counts, instance.counts),
        _summed(board.window_counts, instance.window_counts),
    )


def _summed(
    a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int], ...]:
    counts: dict[int, int] = dict(a)
    for code, n in b:
        counts[code] = counts.get(code, 0) + n
    return tuple(sorted(counts.items()))


def _fabric_label(readings: GpuReadings, config: LabelConfig) -> Labels:
    domain = readings.fabric_domain
    if not config.fabric_cluster_label or domain is None:
        return ()
    return ((config.fabric_cluster_label, domain.cluster_uuid),)


def device_entities(snapshot: NodeSnapshot, config: LabelConfig) -> list[Entity]:
    """The DCGM entities of `snapshot`, without pod labels."""
    host = host_labels(config)
    driver: Labels = ()
    if config.driver_version_label and snapshot.driver_version:
        driver = ((config.driver_version_label, snapshot.driver_version),)
    entities: list[Entity] = []
    for gpu in snapshot.gpus:
        if not gpu.up or gpu.readings is None:
            continue
        ident = gpu.identity
        base: Labels = (
            ("gpu", str(ident.index)),
            ("UUID", ident.uuid),
            ("pci_bus_id", ident.pci_bus_id),
            ("device", ident.device),
            ("modelName", ident.name),
        )
        # String fields a --collectors file lists as labels: the driver version (node-wide),
        # then the fabric cluster UUID of this GPU, where it has one.
        strings = driver + _fabric_label(gpu.readings, config)
        if not ident.mig_enabled:
            entities.append(
                Entity(gpu, None, base + host + strings, gpu.readings, gpu.xid, gpu.profiling)
            )
            continue
        for inst in gpu.mig_instances:
            labels = (
                *base,
                ("GPU_I_PROFILE", inst.profile),
                ("GPU_I_ID", str(inst.gpu_instance_id)),
                *host,
                *strings,
            )
            # The instance's own framebuffer, and no utilization (NVML has none per instance).
            readings = gpu.readings.with_values(
                {
                    FB_TOTAL: inst.fb_total_bytes,
                    FB_USED: inst.fb_used_bytes,
                    FB_FREE: inst.fb_free_bytes,
                    FB_RESERVED: inst.fb_reserved_bytes,
                    **dict.fromkeys(UTILIZATION),
                }
            )
            xid = merge_xid(gpu.xid, gpu.instance_xid(inst.gpu_instance_id))
            profiling = gpu.profiling_of(inst.gpu_instance_id)
            entities.append(Entity(gpu, inst, labels, readings, xid, profiling))
    return entities


def without_pods(snapshot: NodeSnapshot, config: LabelConfig, failure: Exception) -> AttributedNode:
    """`snapshot` as served when its join failed as a whole: the device series, and the
    failure counted as POD_JOIN."""
    return AttributedNode(
        snapshot, tuple(device_entities(snapshot, config)), failures=((POD_JOIN, failure),)
    )
