"""What the node can hand out and has handed out: the kubelet's device-plugin figures with
what NVIDIA's DRA driver offers and has allocated (kube_gpu_exporter/exporter/dra/capacity.py)."""

from __future__ import annotations

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.attribution.model import Capacity
from kube_gpu_exporter.exporter.dra.capacity import dra_allocatable, dra_allocated, dra_units
from kube_gpu_exporter.exporter.dra.resolve import DraIndex
from kube_gpu_exporter.exporter.podresources.attribution import Attribution, allocatable_units
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot


def node_capacity(
    snapshot: NodeSnapshot, attribution: Attribution, context: AttributionContext
) -> Capacity | None:
    """None without pod-resources data."""
    pods = context.pods
    if pods is None:
        return None
    slices = context.kube.resource_slices if context.kube is not None else {}
    slices_synced = context.kube is not None and context.kube.slices_synced is True
    units = allocatable_units(snapshot, pods)
    units_by_gpu = None
    if units is not None:
        dra = dra_units(DraIndex.of(snapshot, slices), attribution.dra_in_use, slices_synced)
        units_by_gpu = {
            g.identity.uuid: units.get(g.identity.uuid, 0) + dra[g.identity.uuid]
            for g in snapshot.gpus
        }
    allocatable: dict[str, int] | None = None
    if pods.allocatable is not None:
        allocatable = dict(pods.allocatable)
        if slices_synced:
            allocatable.update(dra_allocatable(slices))
    allocated = dict(pods.allocated)
    allocated.update(dra_allocated(attribution.dra_in_use))
    resources = sorted({*allocated, *(allocatable or ())})
    return Capacity(
        units_by_gpu,
        None if allocatable is None else tuple(sorted(allocatable.items())),
        tuple((r, allocated.get(r, 0)) for r in resources),
    )
