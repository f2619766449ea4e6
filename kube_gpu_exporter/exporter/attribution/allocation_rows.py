"""Which pod holds which device, as the allocation family's samples: every holder of every
device, those of devices NVML does not show included, with the replicas it holds; and the DRA
devices of running containers that name no NVML device."""

from __future__ import annotations

from kube_gpu_exporter.exporter.attribution.devices import device_key_labels, host_labels
from kube_gpu_exporter.exporter.attribution.model import CountRow, Labels
from kube_gpu_exporter.exporter.attribution.pod_series import dra_labels
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import KubernetesView
from kube_gpu_exporter.exporter.podresources.attribution import Attribution, Holder
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot


def _holder_labels(holder: Holder, kube: KubernetesView | None) -> Labels:
    labels: Labels = (
        ("namespace", holder.namespace),
        ("pod", holder.pod),
        ("container", holder.container),
        ("resource", holder.resource),
        ("device_id", holder.device_id),
        *dra_labels(holder),
    )
    if kube is not None:
        meta = kube.pods.get((holder.namespace, holder.pod))
        if meta is not None:
            labels += (
                ("pod_uid", meta.uid),
                ("owner_kind", meta.owner_kind),
                ("owner_name", meta.owner_name),
                *meta.labels,
            )
    return labels


def allocation_rows(
    snapshot: NodeSnapshot,
    attribution: Attribution,
    kube: KubernetesView | None,
    config: LabelConfig,
) -> tuple[CountRow, ...]:
    host = host_labels(config)
    rows: list[CountRow] = []
    for key, holders in sorted(
        attribution.holders.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)
    ):
        device = device_key_labels(snapshot, key)
        for holder in holders:
            rows.append((device + host + _holder_labels(holder, kube), holder.replicas))
    for holder in attribution.unresolved:
        labels = (("gpu", ""), ("UUID", ""), *host, *_holder_labels(holder, kube))
        rows.append((labels, holder.replicas))
    return tuple(rows)


def dra_unresolved_rows(attribution: Attribution, config: LabelConfig) -> tuple[CountRow, ...]:
    host = host_labels(config)
    return tuple(
        ((*host, ("driver", driver), ("reason", reason)), n)
        for (driver, reason), n in attribution.dra_unresolved
    )
