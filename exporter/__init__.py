"""kube-gpu-exporter: NVIDIA GPU metrics for Kubernetes, compatible with dcgm-exporter."""

__version__ = "0.1.0"
