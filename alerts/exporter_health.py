"""Alerts on the exporter itself: scraped at all, collecting, and able to reach NVML and the
kubelet. Without these a silent exporter looks exactly like a healthy GPU fleet."""

from __future__ import annotations

from alerts import templates as t
from alerts.rule_types import Alert, Group
from bundle.config import BundleConfig
from bundle.promql import Q


def group(config: BundleConfig) -> Group:
    q = Q(config)
    th, sev = config.thresholds, config.severity
    target = t.exporter_target(config)
    return Group(
        "kube-gpu-exporter",
        (
            Alert(
                "GPUExporterDown",
                f"absent({q.exporter('up')})",
                th.exporter_down_for,
                sev.critical,
                "No kube-gpu-exporter target is being scraped.",
                "Prometheus has discovered no target of job {{ $labels.job }} for "
                f"{th.exporter_down_for}: every GPU metric and GPU alert is blind. Check the "
                "DaemonSet and the scrape configuration.",
            ),
            Alert(
                "GPUExporterTargetDown",
                f"{q.exporter('up')} == 0",
                th.exporter_down_for,
                sev.warning,
                "A kube-gpu-exporter target is down.",
                f"{target} has not answered a scrape for {th.exporter_down_for}: "
                "the GPUs of that node are unmonitored.",
            ),
            Alert(
                "GPUExporterStale",
                f"{q.exporter('kube_gpu_exporter_snapshot_stale')} == 1",
                th.exporter_stale_for,
                sev.warning,
                "The GPU exporter serves stale metrics.",
                f"{target} has finished no NVML sweep in time for {th.exporter_stale_for}; "
                "it keeps serving its last snapshot. An NVML call is probably hanging.",
            ),
            Alert(
                "GPUExporterNvmlDown",
                f"{q.exporter('kube_gpu_exporter_nvml_up')} == 0",
                th.nvml_down_for,
                sev.critical,
                "NVML is not answering on a GPU node.",
                f"{target} cannot initialise NVML (driver not loaded, or "
                f"libnvidia-ml not mounted) for {th.nvml_down_for}: no GPU on that node is "
                "usable or monitored.",
            ),
            Alert(
                "GPUExporterPodResourcesDown",
                f"{q.exporter('kube_gpu_exporter_podresources_up')} == 0",
                th.podresources_down_for,
                sev.warning,
                "The kubelet pod-resources API is not answering.",
                f"{target} has failed to read the kubelet pod-resources socket for "
                f"{th.podresources_down_for}: GPU metrics lose their pod labels and "
                "allocation figures go stale.",
            ),
        ),
    )
