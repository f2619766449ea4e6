"""Families that come from the kubelet and the Kubernetes API rather than from NVML: which pod
holds which device, node GPU capacity, node labels, and the health of both sources."""

from __future__ import annotations

from collections import Counter

from exporter.config import LabelConfig
from exporter.dra.capacity import dra_allocatable, dra_allocated, dra_units
from exporter.dra.resolve import DraIndex
from exporter.exposition import own_families as own
from exporter.exposition.context import AttributionContext
from exporter.exposition.entities import device_labels, dra_labels, host_labels
from exporter.exposition.text_format import FamilyWriter, Labels, format_value, label_body
from exporter.podresources.attribution import Attribution, Holder, allocatable_units
from exporter.snapshot import NodeSnapshot


def device_key_labels(snapshot: NodeSnapshot, key: tuple[str, int | None]) -> Labels:
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


def _holder_labels(holder: Holder, context: AttributionContext) -> Labels:
    labels: Labels = (
        ("namespace", holder.namespace),
        ("pod", holder.pod),
        ("container", holder.container),
        ("resource", holder.resource),
        ("device_id", holder.device_id),
        *dra_labels(holder),
    )
    if context.kube is not None:
        meta = context.kube.pods.get((holder.namespace, holder.pod))
        if meta is not None:
            labels += (
                ("pod_uid", meta.uid),
                ("owner_kind", meta.owner_kind),
                ("owner_name", meta.owner_name),
                *meta.labels,
            )
    return labels


def render_allocations(
    out: FamilyWriter,
    snapshot: NodeSnapshot,
    attribution: Attribution,
    context: AttributionContext,
    config: LabelConfig,
) -> None:
    host = host_labels(config)
    samples = []
    for key, holders in sorted(
        attribution.holders.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)
    ):
        device = device_key_labels(snapshot, key)
        for holder in holders:
            body = label_body(device + host + _holder_labels(holder, context))
            samples.append((body, str(holder.replicas)))
    for holder in attribution.unresolved:
        body = label_body((("gpu", ""), ("UUID", ""), *host, *_holder_labels(holder, context)))
        samples.append((body, str(holder.replicas)))
    out.family(own.POD_DEVICE_ALLOCATION, samples)


def render_capacity(
    out: FamilyWriter,
    snapshot: NodeSnapshot,
    attribution: Attribution,
    context: AttributionContext,
    config: LabelConfig,
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
    pods = context.pods
    if pods is None:
        return
    slices = context.kube.resource_slices if context.kube is not None else {}
    slices_synced = context.kube is not None and context.kube.slices_synced is True
    units = allocatable_units(snapshot, pods)
    if units is not None:
        dra = dra_units(DraIndex.of(snapshot, slices), attribution, slices_synced)
        out.family(
            own.DEVICE_ALLOCATABLE_UNITS,
            [
                (
                    label_body(device_labels(g.identity, config)),
                    str(units.get(g.identity.uuid, 0) + dra[g.identity.uuid]),
                )
                for g in snapshot.gpus
            ],
        )
    allocatable: dict[str, int] | None = None
    if pods.allocatable is not None:
        allocatable = dict(pods.allocatable)
        if slices_synced:
            allocatable.update(dra_allocatable(slices))
        out.family(
            own.NODE_ALLOCATABLE_DEVICES,
            [
                (label_body((*host, ("resource", r))), str(n))
                for r, n in sorted(allocatable.items())
            ],
        )
    allocated = dict(pods.allocated)
    allocated.update(dra_allocated(attribution))
    resources = sorted({*allocated, *(allocatable or ())})
    out.family(
        own.NODE_ALLOCATED_DEVICES,
        [(label_body((*host, ("resource", r))), str(allocated.get(r, 0))) for r in resources],
    )


def render_dra_unresolved(out: FamilyWriter, attribution: Attribution, config: LabelConfig) -> None:
    host = host_labels(config)
    out.family(
        own.DRA_DEVICES_UNRESOLVED,
        [
            (label_body((*host, ("driver", driver), ("reason", reason))), str(n))
            for (driver, reason), n in attribution.dra_unresolved
        ],
    )


def render_source_health(
    out: FamilyWriter, context: AttributionContext, config: LabelConfig
) -> None:
    status = context.pods_status
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
    view = context.kube
    if view is None:
        return
    host = host_labels(config)
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
        [
            (label_body((("resource", name),)), format_value(at))
            for name, at in (
                ("pods", view.pods_updated_at),
                ("node", view.node_updated_at),
                ("resourceslices", view.slices_updated_at),
            )
            if at is not None
        ],
    )
    out.family(own.KUBERNETES_WATCH_ERRORS_TOTAL, [("", str(view.watch_errors))])
    out.family(own.KUBERNETES_RELISTS_TOTAL, [("", str(view.relists))])
    out.family(own.POD_LABELS_DROPPED_TOTAL, [("", str(view.labels_dropped))])
    out.family(
        own.POD_SERIES_LABELS_DROPPED_TOTAL,
        [(label_body((("reason", r),)), str(n)) for r, n in view.series_labels_dropped],
    )
    if view.node_synced:
        from exporter.kubernetes.label_names import sanitize_label_name

        out.family(
            own.NODE_INFO,
            [
                (
                    label_body(
                        (*host, *((sanitize_label_name(k), v) for k, v in view.node_labels))
                    ),
                    "1",
                )
            ],
        )
