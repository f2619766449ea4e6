"""Families of per-container GPU use, joined from process accounting
(kube_gpu_exporter/exporter/attribution/)."""

from __future__ import annotations

from kube_gpu_exporter.exporter.attribution.model import PodUsage
from kube_gpu_exporter.exporter.exposition import own_families as own
from kube_gpu_exporter.exporter.exposition.text_format import (
    FamilyWriter,
    count_samples,
    format_value,
    label_body,
)
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot


def render_pod_usage(out: FamilyWriter, usage: PodUsage) -> None:
    memory, sm, count = [], [], []
    for labels, processes, memory_bytes, sm_ratio in usage.containers:
        body = label_body(labels)
        count.append((body, str(processes)))
        if memory_bytes is not None:
            memory.append((body, str(memory_bytes)))
        if sm_ratio is not None:
            sm.append((body, format_value(sm_ratio)))
    out.family(own.POD_GPU_MEMORY_USED_BYTES, memory)
    out.family(own.POD_GPU_SM_UTILIZATION_RATIO, sm)
    out.family(own.POD_GPU_PROCESSES, count)
    out.family(own.GPU_PROCESSES_UNATTRIBUTED, count_samples(usage.unattributed))


def log_name_conflict_samples(snapshot: NodeSnapshot) -> list[tuple[str, str]]:
    """PROCESS_LOG_NAME_CONFLICTS' one sample, or none with process accounting off (or owners
    that do not count): 0 must mean "looked, found none", never "did not look"."""
    conflicts = snapshot.process_log_name_conflicts
    return [] if conflicts is None else [("", str(conflicts))]
