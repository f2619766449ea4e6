"""kube-gpu-exporter: NVIDIA GPU metrics for Kubernetes, compatible with dcgm-exporter.

The distribution's one top-level package: `exporter` is the node agent, `bundle` the generator of
the dashboards, rules, scrape configs and manifests that go with it."""

__version__ = "0.1.0"
