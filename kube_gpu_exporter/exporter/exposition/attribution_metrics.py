"""Families that come from the kubelet and the Kubernetes API rather than from NVML: which pod
holds which device, node GPU capacity, node labels, and the health of both sources. Their label
sets and figures come joined (kube_gpu_exporter/exporter/attribution/); only the physical counts are
read here, from the snapshot."""

from __future__ import annotations

from collections import Counter

from kube_gpu_exporter.exporter.attribution.devices import device_labels, host_labels
from kube_gpu_exporter.exporter.attribution.model import Capacity, CountRow, SourceHealth
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.exposition import own_families as own
from kube_gpu_exporter.exporter.exposition.text_format import (
    FamilyWriter,
    count_samples,
    format_value,
    label_body,
)
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot


def render_allocations(out: FamilyWriter, allocations: tuple[CountRow, ...]) -> None:
    out.family(own.POD_DEVICE_ALLOCATION, count_samples(allocations))


def render_capacity(
    out: FamilyWriter, snapshot: NodeSnapshot, capacity: Capacity | None, config: LabelConfig
) -> None:
    host = host_labels(config)
    out.family(
        own.NODE_PHYSICAL_GPUS,
        [(label_body(host), str(len(snapshot.gpus)))] if snapshot.nvml_up else [],
    )
    profiles = Counter(
        inst.profile for gpu in snapshot.gpus if gpu.up for inst in gpu.mig_instances
    )
    out.family(
        own.NODE_MIG_INSTANCES,
        [(label_body((*host, ("profile", p))), str(n)) for p, n in sorted(profiles.items())],
    )
    if capacity is None:
        return
    units = capacity.units_by_gpu
    if units is not None:
        out.family(
            own.DEVICE_ALLOCATABLE_UNITS,
            [
                (label_body(device_labels(g.identity, config)), str(units[g.identity.uuid]))
                for g in snapshot.gpus
            ],
        )
    if capacity.allocatable is not None:
        out.family(
            own.NODE_ALLOCATABLE_DEVICES,
            [(label_body((*host, ("resource", r))), str(n)) for r, n in capacity.allocatable],
        )
    out.family(
        own.NODE_ALLOCATED_DEVICES,
        [(label_body((*host, ("resource", r))), str(n)) for r, n in capacity.allocated],
    )


def render_dra_unresolved(out: FamilyWriter, unresolved: tuple[CountRow, ...]) -> None:
    out.family(own.DRA_DEVICES_UNRESOLVED, count_samples(unresolved))


def render_source_health(out: FamilyWriter, sources: SourceHealth) -> None:
    status = sources.podresources
    if status is not None:
        out.family(own.PODRESOURCES_UP, [("", format_value(status.up))])
        if status.last_success_at is not None:
            out.family(
                own.PODRESOURCES_LAST_SUCCESS_TIMESTAMP_SECONDS,
                [("", format_value(status.last_success_at))],
            )
        out.family(
            own.PODRESOURCES_ERRORS_TOTAL,
            [(label_body((("code", code),)), str(n)) for code, n in status.errors],
        )
    view = sources.kubernetes
    if view is None:
        return
    out.family(
        own.KUBERNETES_WATCH_UP,
        [
            (label_body((("resource", "pods"),)), format_value(view.pods_synced)),
            (label_body((("resource", "node"),)), format_value(view.node_synced)),
            *(
                [(label_body((("resource", "resourceslices"),)), format_value(view.slices_synced))]
                if view.slices_synced is not None
                else []
            ),
        ],
    )
    out.family(
        own.KUBERNETES_LAST_UPDATE_TIMESTAMP_SECONDS,
        [(label_body((("resource", name),)), format_value(at)) for name, at in view.updated_at],
    )
    out.family(own.KUBERNETES_WATCH_ERRORS_TOTAL, [("", str(view.watch_errors))])
    out.family(own.KUBERNETES_RELISTS_TOTAL, [("", str(view.relists))])
    out.family(own.POD_LABELS_DROPPED_TOTAL, [("", str(view.labels_dropped))])
    out.family(
        own.POD_SERIES_LABELS_DROPPED_TOTAL,
        [(label_body((("reason", r),)), str(n)) for r, n in view.series_labels_dropped],
    )
    if view.node_info is not None:
        out.family(own.NODE_INFO, [(label_body(view.node_info), "1")])
