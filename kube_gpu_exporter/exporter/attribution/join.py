"""The attribution join: one NodeSnapshot with what the kubelet, the Kubernetes API and process
accounting say about its devices, into the AttributedNode the renderer reads.

Device plugin, DRA and time-slicing holders come from pod-resources (podresources/attribution.py),
resolved against NVML and the node's ResourceSlices (kube_gpu_exporter/exporter/dra/); process
accounting says which container uses how much of each device (processes/pod_usage.py); from both,
how each GPU's energy is split among its containers (energy_shares.py), which the ledger
(pod_energy.py) then applies. Run once per snapshot, on the thread that renders it, never per
scrape.

What comes from outside (pod labels, names, API and kubelet answers) must not cost the rest: a
part that fails is left out and named in `failures`, and a failing pod join leaves the device
series without pods (issue 31). The renderer counts each in render_errors_total.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kube_gpu_exporter.exporter.attribution.allocation_rows import (
    allocation_rows,
    dra_unresolved_rows,
)
from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.attribution.devices import POD_JOIN, device_entities
from kube_gpu_exporter.exporter.attribution.energy_shares import ENERGY_SHARES, energy_shares
from kube_gpu_exporter.exporter.attribution.model import AttributedNode, Entity, SourceHealth
from kube_gpu_exporter.exporter.attribution.node_capacity import node_capacity
from kube_gpu_exporter.exporter.attribution.pod_series import with_pods
from kube_gpu_exporter.exporter.attribution.source_health import source_health
from kube_gpu_exporter.exporter.attribution.usage_rows import pod_usage_rows
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.podresources.attribution import (
    EMPTY,
    Attribution,
    DeviceKey,
    attribute,
)
from kube_gpu_exporter.exporter.processes.pod_usage import DeviceUsage, pod_usage
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot

_T = TypeVar("_T")


def join(
    snapshot: NodeSnapshot, context: AttributionContext, config: LabelConfig
) -> AttributedNode:
    """`snapshot` with the pods and sources of `context`, labelled as `config` asks."""
    failures: list[tuple[str, Exception]] = []

    def part(name: str, compute: Callable[[], _T], left_out: _T) -> _T:
        try:
            return compute()
        except Exception as exc:
            failures.append((name, exc))
            return left_out

    try:
        attribution, usage, entities = _holders_and_users(snapshot, context, config)
        joined = True
    except Exception as exc:
        failures.append((POD_JOIN, exc))
        attribution, usage, entities = EMPTY, {}, device_entities(snapshot, config)
        joined = False
    kube = context.kube
    enabled = context.attribution_enabled
    # Only from a kubelet answer and a join that worked: without them every joule would go to
    # the unattributed rows; with no split the ledger waits, and the next one covers the gap.
    split = enabled and joined and context.pods is not None
    return AttributedNode(
        snapshot,
        tuple(entities),
        collectors=part("own metrics", context.collector_statuses, ()),
        sources=part("sources", lambda: source_health(context, config), SourceHealth()),
        capacity=part("capacity", lambda: node_capacity(snapshot, attribution, context), None),
        allocations=(
            part("allocations", lambda: allocation_rows(snapshot, attribution, kube, config), None)
            if enabled
            else None
        ),
        dra_unresolved=(
            part("dra", lambda: dra_unresolved_rows(attribution, config), None) if enabled else None
        ),
        pod_usage=(
            part("pod usage", lambda: pod_usage_rows(snapshot, usage, config), None)
            if usage
            else None
        ),
        energy_shares=(
            part(ENERGY_SHARES, lambda: energy_shares(snapshot, attribution, usage, config), None)
            if split
            else None
        ),
        failures=tuple(failures),
    )


def _holders_and_users(
    snapshot: NodeSnapshot, context: AttributionContext, config: LabelConfig
) -> tuple[Attribution, dict[DeviceKey, DeviceUsage], list[Entity]]:
    attribution = attribute(
        snapshot, context.pods, None if context.kube is None else context.kube.resource_slices
    )
    # Process accounting stands on its own: without pod-resources every process is on its
    # device's unattributed row, with the reason.
    usage = (
        pod_usage(snapshot, attribution if context.attribution_enabled else None, context.kube)
        if any(g.processes is not None for g in snapshot.gpus)
        else {}
    )
    entities = with_pods(
        device_entities(snapshot, config), config, attribution, context.kube, usage
    )
    return attribution, usage, entities
