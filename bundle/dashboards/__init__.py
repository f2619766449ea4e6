"""Grafana dashboards for kube-gpu-exporter, built with grafanalib from bundle.config."""
