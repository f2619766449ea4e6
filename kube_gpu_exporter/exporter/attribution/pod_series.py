"""Pod labels on the DCGM series, from the holders pod-resources gives each device.

One container holding a device gives its series `container`, `namespace` and `pod`, as
dcgm-exporter does. A device shared by several containers gets no pod labels by default (none of
them owns it), or one copy of its series per holder.

From the Kubernetes view, dcgm-exporter's opt-ins add to a holder's series its `pod_uid`
(--kubernetes.enable-pod-uid) and the pod's own labels (--kubernetes.enable-pod-labels, spelt and
filtered in kubernetes/pod_metadata.py). The per-holder copies (--attribution.shared-devices=
per-pod) are dcgm-exporter's virtual-GPU mode: each says in `vgpu` which shares of the device its
container holds, and carries `pod_uid` whenever the pod's UID is known. (dcgm-exporter 4.8.2 puts
`pod_uid` unconditionally only on its per-pod GPU_UTIL and FB_USED copies, on the others with
--kubernetes-enable-pod-uid; one rule for every family keeps the copies joinable.) A container
holding several shares gets one copy with the shares comma-joined, where dcgm-exporter writes one
copy per share, so sums over the copies count the device once per container.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kube_gpu_exporter.exporter.attribution.model import Entity, Labels
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import KubernetesView
from kube_gpu_exporter.exporter.podresources.attribution import (
    Attribution,
    DeviceKey,
    Holder,
    share_order,
)
from kube_gpu_exporter.exporter.processes.pod_usage import DeviceUsage, Usage
from kube_gpu_exporter.exporter.snapshot import FB_USED, GPU_UTIL, GpuReadings

PER_POD = "per-pod"

ContainerKey = tuple[str, str, str]


def pod_labels(holder: Holder) -> Labels:
    # Sorted by key, as dcgm-exporter orders its attribute labels.
    return (("container", holder.container), ("namespace", holder.namespace), ("pod", holder.pod))


def dra_labels(holder: Holder) -> Labels:
    """dcgm-exporter's DRA labels (its --kubernetes-enable-dra), for a device held through a
    claim; the MIG pair only for a MIG device, the share ID only where the kubelet gave one."""
    claim = holder.dra
    if claim is None:
        return ()
    labels: Labels = (
        ("dra_claim_name", claim.claim_name),
        ("dra_claim_namespace", claim.claim_namespace),
        ("dra_device_name", claim.device),
        ("dra_driver_name", claim.driver),
    )
    if claim.mig_profile or claim.mig_uuid:
        labels += (("dra_mig_device_uuid", claim.mig_uuid), ("dra_mig_profile", claim.mig_profile))
    labels += (("dra_pool_name", claim.pool),)
    if claim.share_id is not None:
        labels += (("dra_share_id", claim.share_id),)
    return labels


def is_shared(holders: tuple[Holder, ...]) -> bool:
    """No single container owns a device that several containers hold, that several DRA claims
    name, or that the kubelet gave out as a share (a DRA share ID, like time-slicing replicas)."""
    if len(_by_container(holders)) > 1:
        return True
    claims = {(h.dra.claim_namespace, h.dra.claim_name) for h in holders if h.dra is not None}
    return len(claims) > 1 or any(h.dra is not None and h.dra.share_id for h in holders)


def _by_container(holders: tuple[Holder, ...]) -> dict[ContainerKey, list[Holder]]:
    """A container may hold one device through several resources (or several GKE shares)."""
    grouped: dict[ContainerKey, list[Holder]] = {}
    for holder in holders:
        grouped.setdefault((holder.namespace, holder.pod, holder.container), []).append(holder)
    return grouped


def _holder_labels(
    entity: Entity,
    held: list[Holder],
    config: LabelConfig,
    kube: KubernetesView | None,
    per_pod: bool,
) -> Labels:
    holder = held[0]
    meta = None if kube is None else kube.pods.get((holder.namespace, holder.pod))
    own = {name for name, _ in entity.labels}
    labels: Labels = ()
    if meta is not None and config.pod_labels_on_series:
        # The watcher already left out names the series carry; this keeps a label the renderer
        # adds to the entity later (a new profile label) from ever appearing twice.
        labels += tuple((k, v) for k, v in meta.series_labels if k not in own)
    labels += pod_labels(holder)
    labels += dra_labels(holder)
    if meta is not None and meta.uid and (per_pod or config.pod_uid_on_series):
        labels += (("pod_uid", meta.uid),)
    if per_pod:
        shares = sorted({s for h in held for s in h.shares}, key=share_order)
        if shares:
            labels += (("vgpu", ",".join(shares)),)
    return labels


def _own_use(readings: GpuReadings, use: Usage | None) -> GpuReadings:
    """A per-pod copy's GPU_UTIL and FB_USED as the pod's own (dcgm-exporter's virtual-GPU mode):
    nothing running is 0, not the device's figure."""
    memory = 0 if use is None or use.memory_bytes is None else use.memory_bytes
    if readings.gpu_util_pct is None:  # a MIG instance: NVML has no utilization there
        return readings.with_values({FB_USED: memory})
    sm = 0 if use is None or use.sm_pct is None else use.sm_pct
    return readings.with_values({GPU_UTIL: min(sm, 100), FB_USED: memory})


def _with_holders(
    entity: Entity,
    holders: tuple[Holder, ...],
    config: LabelConfig,
    kube: KubernetesView | None,
    usage: DeviceUsage | None,
) -> list[Entity]:
    containers = _by_container(holders)
    per_pod = config.shared_device_series == PER_POD
    if (containers and not is_shared(holders)) or (containers and per_pod):
        own_use = per_pod and config.per_pod_usage and usage is not None
        return [
            replace(
                entity,
                labels=entity.labels + _holder_labels(entity, held, config, kube, per_pod),
                readings=(
                    _own_use(entity.readings, usage.by_container.get(container))
                    if own_use and usage is not None
                    else entity.readings
                ),
            )
            for container, held in containers.items()
        ]
    return [entity]


def with_pods(
    entities: list[Entity],
    config: LabelConfig,
    attribution: Attribution,
    kube: KubernetesView | None,
    usage: Mapping[DeviceKey, DeviceUsage],
) -> list[Entity]:
    """`entities` with their holders' labels; `kube`, the Kubernetes view, supplies pod UIDs and
    pod labels where the options ask for them; `usage`, each container's own use, for per-pod
    copies under --attribution.per-pod-usage."""
    joined = []
    for entity in entities:
        key = (
            entity.gpu.identity.uuid,
            None if entity.instance is None else entity.instance.gpu_instance_id,
        )
        joined += _with_holders(entity, attribution.for_device(*key), config, kube, usage.get(key))
    return joined
