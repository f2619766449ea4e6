"""Cluster-capacity alerts: GPU nodes that pods cannot use."""

from __future__ import annotations

from kube_gpu_exporter.bundle.alerts import templates
from kube_gpu_exporter.bundle.alerts.rule_types import Alert, Group
from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.promql import QueryBuilder


def group(config: BundleConfig) -> Group:
    # A GPU offered through DRA has allocatable units too (ResourceSlices with --kubernetes,
    # else its claimed devices), so the same expression covers both allocation paths.
    queries = QueryBuilder(config)
    thresholds = config.thresholds
    units = queries.exporter("kube_gpu_exporter_device_allocatable_units")
    return Group(
        "kube-gpu-exporter-capacity",
        (
            Alert(
                "GPUClusterNodeUnallocatable",
                f"sum {queries.by(queries.host)} (max {queries.by(*queries.gpu_key)} ({units}))"
                " == 0",
                thresholds.node_unallocatable_for,
                config.severity.warning,
                "A GPU node offers no GPU to pods.",
                f"Node {templates.label(queries.host)}{templates.in_cluster(config)} has GPUs "
                "that NVML sees, but neither the device plugin nor the DRA driver has offered "
                f"any of them for {thresholds.node_unallocatable_for}: the plugin or the "
                "driver is not running, not registered, or reports every GPU unhealthy; on a "
                "DRA node, the exporter may lack --kubernetes and see only claimed GPUs.",
            ),
        ),
    )
