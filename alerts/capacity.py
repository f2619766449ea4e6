"""Cluster-capacity alerts: GPU nodes that pods cannot use."""

from __future__ import annotations

from alerts import templates as t
from alerts.rule_types import Alert, Group
from bundle.config import BundleConfig
from bundle.promql import Q


def group(config: BundleConfig) -> Group:
    q = Q(config)
    th = config.thresholds
    units = q.exporter("kube_gpu_exporter_device_allocatable_units")
    return Group(
        "kube-gpu-exporter-capacity",
        (
            Alert(
                "GPUClusterNodeUnallocatable",
                f"sum {q.by(q.host)} (max {q.by(*q.gpu_key)} ({units})) == 0",
                th.node_unallocatable_for,
                config.severity.warning,
                "A GPU node offers no GPU to pods.",
                f"Node {t.label(q.host)}{t.in_cluster(config)} has GPUs that NVML sees, but "
                f"the kubelet has offered none of them for {th.node_unallocatable_for}: the "
                "NVIDIA device plugin is not running, not registered, or reports every GPU "
                "unhealthy.",
            ),
        ),
    )
