"""What the exposition joins with each NVML snapshot: the latest pod-resources data and, when
enrichment is on, the Kubernetes API view. Taken at publish time, so the join happens once per
snapshot and never per scrape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.kubernetes.pod_metadata import KubernetesView
    from exporter.podresources.allocations import PodResourcesSnapshot
    from exporter.podresources.client import PodResourcesStatus


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


NO_CONTEXT = AttributionContext()
