"""Flattens a snapshot into dcgm-exporter's entities and their label sets.

dcgm-exporter's default "flex" mode monitors a MIG-enabled GPU only through its GPU instances, and
a plain GPU as a whole. Each instance repeats its parent's `gpu`, `UUID`, `pci_bus_id`, `device`
and `modelName`, adds `GPU_I_PROFILE` and `GPU_I_ID`, carries its own framebuffer figures and
repeats the board-level ones (temperature, power, clocks). Utilization does not exist on MIG;
GPM's profiling metrics do, per instance, on Hopper and newer.

Pod labels follow the holders from pod-resources: one container holding a device gives its series
`container`, `namespace` and `pod`, as dcgm-exporter does. A device shared by several containers
gets no pod labels by default (none of them owns it), or one copy of its series per holder.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from exporter.config import HostLabel, LabelConfig
from exporter.exposition.text_format import Labels
from exporter.podresources.attribution import EMPTY, Attribution, Holder
from exporter.snapshot import (
    GpuIdentity,
    GpuReadings,
    GpuSnapshot,
    MigInstance,
    NodeSnapshot,
    ProfilingReadings,
    XidRecord,
)


@dataclass(frozen=True, slots=True)
class Entity:
    gpu: GpuSnapshot
    instance: MigInstance | None
    labels: Labels
    readings: GpuReadings
    xid: XidRecord
    holders: tuple[Holder, ...] = ()
    profiling: ProfilingReadings | None = None


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


def merge_xid(board: XidRecord, instance: XidRecord) -> XidRecord:
    """An instance sees XIDs raised for it and the unattributed ones of its board."""
    if not instance.counts:
        return board
    if not board.counts:
        return instance
    counts: dict[int, int] = dict(board.counts)
    for code, n in instance.counts:
        counts[code] = counts.get(code, 0) + n
    newest = board if board.sequence >= instance.sequence else instance
    return XidRecord(newest.last_xid, newest.sequence, tuple(sorted(counts.items())))


def pod_labels(holder: Holder) -> Labels:
    # Sorted by key, as dcgm-exporter orders its attribute labels.
    return (("container", holder.container), ("namespace", holder.namespace), ("pod", holder.pod))


def _with_holders(entity: Entity, holders: tuple[Holder, ...], config: LabelConfig) -> list[Entity]:
    containers = {(h.namespace, h.pod, h.container) for h in holders}
    if len(containers) == 1:
        return [replace(entity, labels=entity.labels + pod_labels(holders[0]), holders=holders)]
    if len(containers) > 1 and config.shared_device_series == "per-pod":
        seen: set[tuple[str, str, str]] = set()
        copies = []
        for holder in holders:
            key = (holder.namespace, holder.pod, holder.container)
            if key not in seen:
                seen.add(key)
                copies.append(
                    replace(entity, labels=entity.labels + pod_labels(holder), holders=holders)
                )
        return copies
    return [replace(entity, holders=holders)]


def dcgm_entities(
    snapshot: NodeSnapshot, config: LabelConfig, attribution: Attribution = EMPTY
) -> list[Entity]:
    return [
        labelled
        for entity in _device_entities(snapshot, config)
        for labelled in _with_holders(
            entity,
            attribution.for_device(
                entity.gpu.identity.uuid,
                None if entity.instance is None else entity.instance.gpu_instance_id,
            ),
            config,
        )
    ]


def _device_entities(snapshot: NodeSnapshot, config: LabelConfig) -> list[Entity]:
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
        if not ident.mig_enabled:
            entities.append(
                Entity(gpu, None, base + host + driver, gpu.readings, gpu.xid, (), gpu.profiling)
            )
            continue
        for inst in gpu.mig_instances:
            labels = (
                *base,
                ("GPU_I_PROFILE", inst.profile),
                ("GPU_I_ID", str(inst.gpu_instance_id)),
                *host,
                *driver,
            )
            readings = replace(
                gpu.readings,
                fb_total_bytes=inst.fb_total_bytes,
                fb_used_bytes=inst.fb_used_bytes,
                fb_free_bytes=inst.fb_free_bytes,
                fb_reserved_bytes=inst.fb_reserved_bytes,
                gpu_util_pct=None,
                mem_copy_util_pct=None,
                encoder_util_pct=None,
                decoder_util_pct=None,
            )
            xid = merge_xid(gpu.xid, gpu.instance_xid(inst.gpu_instance_id))
            profiling = gpu.profiling_of(inst.gpu_instance_id)
            entities.append(Entity(gpu, inst, labels, readings, xid, (), profiling))
    return entities
