"""Per-container GPU use from process accounting (processes/pod_usage.py), as the pod usage
families show it: one row per container with processes on a device, and the device's
unattributed processes by reason."""

from __future__ import annotations

from collections.abc import Mapping

from kube_gpu_exporter.exporter.attribution.devices import (
    container_labels,
    device_key_labels,
    host_labels,
)
from kube_gpu_exporter.exporter.attribution.model import ContainerUse, CountRow, PodUsage
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.processes.pod_usage import DeviceKey, DeviceUsage
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot


def pod_usage_rows(
    snapshot: NodeSnapshot, usage: Mapping[DeviceKey, DeviceUsage], config: LabelConfig
) -> PodUsage:
    host = host_labels(config)
    containers: list[ContainerUse] = []
    unattributed: list[CountRow] = []
    for key in sorted(usage, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        device = (*device_key_labels(snapshot, key), *host)
        entry = usage[key]
        for container, use in sorted(entry.by_container.items()):
            labels = container_labels(device, container)
            # No sample in the window means no busy process: 0, not unknown.
            sm = (use.sm_pct or 0) / 100 if key[1] is None else None
            containers.append((labels, use.processes, use.memory_bytes, sm))
        for reason, n in sorted(entry.unattributed.items()):
            unattributed.append(((*device, ("reason", reason)), n))
    return PodUsage(tuple(containers), tuple(unattributed))
