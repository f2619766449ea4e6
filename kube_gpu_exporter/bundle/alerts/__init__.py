"""Prometheus alerting and recording rules for kube-gpu-exporter, generated from
kube_gpu_exporter.bundle.config."""
