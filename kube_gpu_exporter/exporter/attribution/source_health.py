"""How the pod-resources and Kubernetes sources are doing, as the renderer shows it: the
kubelet's answers and errors, the watches' sync and counters, and the node's GPU labels."""

from __future__ import annotations

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.attribution.devices import host_labels
from kube_gpu_exporter.exporter.attribution.model import (
    KubernetesHealth,
    PodResourcesHealth,
    SourceHealth,
)
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.kubernetes.label_names import sanitize_label_name
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import KubernetesView


def source_health(context: AttributionContext, config: LabelConfig) -> SourceHealth:
    status = context.pods_status
    return SourceHealth(
        None
        if status is None
        else PodResourcesHealth(status.up, status.last_success_at, status.errors),
        None if context.kube is None else _kubernetes_health(context.kube, config),
    )


def _kubernetes_health(view: KubernetesView, config: LabelConfig) -> KubernetesHealth:
    node_info = None
    if view.node_synced:
        node_info = (
            *host_labels(config),
            *((sanitize_label_name(k), v) for k, v in view.node_labels),
        )
    return KubernetesHealth(
        pods_synced=view.pods_synced,
        node_synced=view.node_synced,
        slices_synced=view.slices_synced,
        updated_at=tuple(
            (name, at)
            for name, at in (
                ("pods", view.pods_updated_at),
                ("node", view.node_updated_at),
                ("resourceslices", view.slices_updated_at),
            )
            if at is not None
        ),
        watch_errors=view.watch_errors,
        relists=view.relists,
        labels_dropped=view.labels_dropped,
        series_labels_dropped=view.series_labels_dropped,
        node_info=node_info,
    )
