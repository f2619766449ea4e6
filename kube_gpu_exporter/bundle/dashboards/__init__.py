"""Grafana dashboards for kube-gpu-exporter, built with grafanalib from
kube_gpu_exporter.bundle.config."""
