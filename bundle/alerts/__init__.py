"""Prometheus alerting and recording rules for kube-gpu-exporter, generated from bundle.config."""
