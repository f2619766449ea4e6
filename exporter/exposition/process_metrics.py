"""Families of per-container GPU use, from the process accounting join (processes/pod_usage.py)."""

from __future__ import annotations

from exporter.config import LabelConfig
from exporter.exposition import own_families as own
from exporter.exposition.attribution_metrics import device_key_labels
from exporter.exposition.entities import host_labels
from exporter.exposition.text_format import FamilyWriter, format_value, label_body
from exporter.processes.pod_usage import DeviceKey, DeviceUsage
from exporter.snapshot import NodeSnapshot


def render_pod_usage(
    out: FamilyWriter,
    snapshot: NodeSnapshot,
    usage: dict[DeviceKey, DeviceUsage],
    config: LabelConfig,
) -> None:
    host = host_labels(config)
    memory, sm, count, unattributed = [], [], [], []
    for key in sorted(usage, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        device = (*device_key_labels(snapshot, key), *host)
        entry = usage[key]
        for (namespace, pod, container), use in sorted(entry.by_container.items()):
            body = label_body(
                (*device, ("namespace", namespace), ("pod", pod), ("container", container))
            )
            count.append((body, str(use.processes)))
            if use.memory_bytes is not None:
                memory.append((body, str(use.memory_bytes)))
            if key[1] is None:
                # No sample in the window means no busy process: 0, not unknown.
                sm.append((body, format_value((use.sm_pct or 0) / 100)))
        for reason, n in sorted(entry.unattributed.items()):
            unattributed.append((label_body((*device, ("reason", reason))), str(n)))
    out.family(own.POD_GPU_MEMORY_USED_BYTES, memory)
    out.family(own.POD_GPU_SM_UTILIZATION_RATIO, sm)
    out.family(own.POD_GPU_PROCESSES, count)
    out.family(own.GPU_PROCESSES_UNATTRIBUTED, unattributed)


def log_name_conflict_samples(snapshot: NodeSnapshot) -> list[tuple[str, str]]:
    """PROCESS_LOG_NAME_CONFLICTS' one sample, or none with process accounting off (or owners
    that do not count): 0 must mean "looked, found none", never "did not look"."""
    conflicts = snapshot.process_log_name_conflicts
    return [] if conflicts is None else [("", str(conflicts))]
