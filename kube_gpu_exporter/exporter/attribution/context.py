"""What the join (join.py) joins with each NVML snapshot: the latest pod-resources data and, when
enrichment is on, the Kubernetes API view. Taken when the snapshot is joined, so the join happens
once per snapshot and never per scrape."""

from __future__ import annotations

from dataclasses import dataclass

from kube_gpu_exporter.exporter.kubernetes.pod_metadata import KubernetesView
from kube_gpu_exporter.exporter.podresources.allocations import PodResourcesSnapshot
from kube_gpu_exporter.exporter.podresources.client import PodResourcesStatus
from kube_gpu_exporter.exporter.snapshot import CollectorStatus


@dataclass(frozen=True, slots=True)
class AttributionContext:
    # None: pod attribution is off (no kubelet socket configured).
    pods: PodResourcesSnapshot | None = None
    pods_status: PodResourcesStatus | None = None
    # None: Kubernetes API enrichment is off.
    kube: KubernetesView | None = None

    @property
    def attribution_enabled(self) -> bool:
        return self.pods_status is not None

    def collector_statuses(self) -> tuple[CollectorStatus, ...]:
        """The pod-resources and Kubernetes sources as node_exporter-style collectors."""
        statuses = []
        if self.pods_status is not None:
            statuses.append(
                CollectorStatus(
                    "podresources", self.pods_status.up, self.pods_status.last_duration_seconds
                )
            )
        if self.kube is not None:
            statuses.append(
                CollectorStatus(
                    "kubernetes",
                    self.kube.pods_synced
                    and self.kube.node_synced
                    and self.kube.slices_synced is not False,
                    0.0,
                )
            )
        return tuple(statuses)


NO_CONTEXT = AttributionContext()
