"""Families that come from the kubelet and the Kubernetes API rather than from NVML: which pod
holds which device, node GPU capacity, node labels, and the health of both sources."""

from __future__ import annotations

from collections import Counter

from exporter.config import LabelConfig
from exporter.exposition.context import AttributionContext
from exporter.exposition.entities import device_labels, host_labels
from exporter.exposition.text_format import FamilyWriter, Labels, format_value, label_body
from exporter.podresources.attribution import Attribution, Holder, allocatable_units
from exporter.snapshot import NodeSnapshot

PREFIX = "kube_gpu_exporter_"


def _device_labels(snapshot: NodeSnapshot, key: tuple[str, int | None]) -> Labels:
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
        device = _device_labels(snapshot, key)
        for holder in holders:
            body = label_body(device + host + _holder_labels(holder, context))
            samples.append((body, str(holder.replicas)))
    for holder in attribution.unresolved:
        body = label_body((("gpu", ""), ("UUID", ""), *host, *_holder_labels(holder, context)))
        samples.append((body, str(holder.replicas)))
    out.family(
        f"{PREFIX}pod_device_allocation",
        "gauge",
        "Devices (or time-slicing/MPS replicas of a device) held by a container, per device, "
        "from the kubelet pod-resources API. Join on UUID and GPU_I_ID to attribute usage.",
        samples,
    )


def render_capacity(
    out: FamilyWriter, snapshot: NodeSnapshot, context: AttributionContext, config: LabelConfig
) -> None:
    host = host_labels(config)
    out.family(
        f"{PREFIX}node_physical_gpus",
        "gauge",
        "GPUs NVML sees on this node, healthy or not.",
        [(label_body(host), str(len(snapshot.gpus)))] if snapshot.nvml_up else [],
    )
    profiles = Counter(
        inst.profile for gpu in snapshot.gpus if gpu.up for inst in gpu.mig_instances
    )
    out.family(
        f"{PREFIX}node_mig_instances",
        "gauge",
        "MIG instances on this node by profile, from NVML.",
        [(label_body((*host, ("profile", p))), str(n)) for p, n in sorted(profiles.items())],
    )
    pods = context.pods
    if pods is None:
        return
    units = allocatable_units(snapshot, pods)
    if units is not None:
        out.family(
            f"{PREFIX}device_allocatable_units",
            "gauge",
            "Device IDs the kubelet can allocate that this GPU backs: 1 for a whole GPU, one per "
            "time-slicing replica or MIG instance; 0 when the device plugin does not offer the "
            "GPU (unhealthy, or no resource for its MIG layout).",
            [
                (
                    label_body(device_labels(g.identity, config)),
                    str(units.get(g.identity.uuid, 0)),
                )
                for g in snapshot.gpus
            ],
        )
    if pods.allocatable is not None:
        out.family(
            f"{PREFIX}node_allocatable_devices",
            "gauge",
            "Devices the kubelet can allocate per resource: healthy devices only, each "
            "time-slicing replica or memory unit counted once.",
            [(label_body((*host, ("resource", r))), str(n)) for r, n in pods.allocatable],
        )
    allocated = dict(pods.allocated)
    resources = sorted({*allocated, *(r for r, _ in pods.allocatable or ())})
    out.family(
        f"{PREFIX}node_allocated_devices",
        "gauge",
        "Devices held by active pods per resource, from the kubelet pod-resources API.",
        [(label_body((*host, ("resource", r))), str(allocated.get(r, 0))) for r in resources],
    )


def render_source_health(
    out: FamilyWriter, context: AttributionContext, config: LabelConfig
) -> None:
    status = context.pods_status
    if status is not None:
        out.family(
            f"{PREFIX}podresources_up",
            "gauge",
            "Whether the last call to the kubelet pod-resources API succeeded (1) or not (0).",
            [("", format_value(status.up))],
        )
        if status.last_success_at is not None:
            out.family(
                f"{PREFIX}podresources_last_success_timestamp_seconds",
                "gauge",
                "Unix time of the last successful pod-resources refresh.",
                [("", format_value(status.last_success_at))],
            )
        out.family(
            f"{PREFIX}podresources_errors_total",
            "counter",
            "Failed pod-resources calls by gRPC status code.",
            [(label_body((("code", code),)), str(n)) for code, n in status.errors],
        )
    view = context.kube
    if view is None:
        return
    host = host_labels(config)
    out.family(
        f"{PREFIX}kubernetes_watch_up",
        "gauge",
        "Whether the watch of this node's pods or of the node object is synced (1) or not (0).",
        [
            (label_body((("resource", "pods"),)), format_value(view.pods_synced)),
            (label_body((("resource", "node"),)), format_value(view.node_synced)),
        ],
    )
    out.family(
        f"{PREFIX}kubernetes_last_update_timestamp_seconds",
        "gauge",
        "Unix time of the last list, event or bookmark received per watched resource.",
        [
            (label_body((("resource", name),)), format_value(at))
            for name, at in (("pods", view.pods_updated_at), ("node", view.node_updated_at))
            if at is not None
        ],
    )
    out.family(
        f"{PREFIX}kubernetes_watch_errors_total",
        "counter",
        "Errors of the Kubernetes API watches.",
        [("", str(view.watch_errors))],
    )
    out.family(
        f"{PREFIX}kubernetes_relists_total",
        "counter",
        "Relists after the API server answered 410 Gone.",
        [("", str(view.relists))],
    )
    out.family(
        f"{PREFIX}pod_labels_dropped_total",
        "counter",
        "Pod label keys left out because a pod exceeded the per-pod label cap.",
        [("", str(view.labels_dropped))],
    )
    if view.node_synced:
        from exporter.kubernetes.label_names import sanitize_label_name

        out.family(
            f"{PREFIX}node_info",
            "gauge",
            "This node's GPU labels from gpu-feature-discovery and the MIG manager; always 1.",
            [
                (
                    label_body(
                        (*host, *((sanitize_label_name(k), v) for k, v in view.node_labels))
                    ),
                    "1",
                )
            ],
        )
