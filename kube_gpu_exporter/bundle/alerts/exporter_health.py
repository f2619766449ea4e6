"""Alerts on the exporter itself: scraped at all, collecting, and able to reach NVML and the
kubelet. Without these a silent exporter looks exactly like a healthy GPU fleet."""

from __future__ import annotations

from kube_gpu_exporter.bundle.alerts import templates
from kube_gpu_exporter.bundle.alerts.rule_types import Alert, Group
from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.promql import QueryBuilder


def group(config: BundleConfig) -> Group:
    queries = QueryBuilder(config)
    thresholds, severity = config.thresholds, config.severity
    target = templates.exporter_target(config)
    return Group(
        "kube-gpu-exporter",
        (
            Alert(
                "GPUExporterDown",
                f"absent({queries.exporter('up')})",
                thresholds.exporter_down_for,
                severity.critical,
                "No kube-gpu-exporter target is being scraped.",
                "Prometheus has discovered no target of job {{ $labels.job }} for "
                f"{thresholds.exporter_down_for}: every GPU metric and GPU alert is blind. Check "
                "the DaemonSet and the scrape configuration.",
            ),
            Alert(
                "GPUExporterTargetDown",
                f"{queries.exporter('up')} == 0",
                thresholds.exporter_down_for,
                severity.warning,
                "A kube-gpu-exporter target is down.",
                f"{target} has not answered a scrape for {thresholds.exporter_down_for}: "
                "the GPUs of that node are unmonitored.",
            ),
            Alert(
                "GPUExporterStale",
                f"{queries.exporter('kube_gpu_exporter_snapshot_stale')} == 1",
                thresholds.exporter_stale_for,
                severity.warning,
                "The GPU exporter serves stale metrics.",
                f"{target} has finished no NVML sweep in time for {thresholds.exporter_stale_for}; "
                "it keeps serving its last snapshot. An NVML call is probably hanging.",
            ),
            Alert(
                "GPUExporterNvmlDown",
                f"{queries.exporter('kube_gpu_exporter_nvml_up')} == 0",
                thresholds.nvml_down_for,
                severity.critical,
                "NVML is not answering on a GPU node.",
                f"{target} cannot initialise NVML (driver not loaded, or "
                f"libnvidia-ml not mounted) for {thresholds.nvml_down_for}: no GPU on that node is "
                "usable or monitored.",
            ),
            Alert(
                "GPUExporterPodResourcesDown",
                f"{queries.exporter('kube_gpu_exporter_podresources_up')} == 0",
                thresholds.podresources_down_for,
                severity.warning,
                "The kubelet pod-resources API is not answering.",
                f"{target} has failed to read the kubelet pod-resources socket for "
                f"{thresholds.podresources_down_for}: GPU metrics lose their pod labels and "
                "allocation figures go stale.",
            ),
        ),
    )
