"""Scrape configurations for every way users run Prometheus, all from the bundle config.

All of them scrape every 15 s with a 10 s timeout, keep the exporter's `pod` and `namespace`
labels (honor_labels; otherwise Prometheus renames them exported_pod / exported_namespace),
name the job so `selectors.exporter` matches, and add the target's `node`.

The operator-based ones also drop the target labels prometheus-operator adds (pod, namespace,
container, service, endpoint): with honor_labels, the exporter's own pod label wins where a
device is allocated, but on every other series the exporter pod's name would be attached, and an
unallocated GPU would look allocated to the exporter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.yaml_output import dump

OPERATOR_TARGET_LABELS = "pod|namespace|container|service|endpoint"


def _meta_label(name: str) -> str:
    """`app.kubernetes.io/name` -> the service-discovery meta label Prometheus derives from it."""
    return "".join(c if c.isalnum() else "_" for c in name)


def kubernetes_job(config: BundleConfig) -> dict[str, Any]:
    """For kube-prometheus-stack's prometheus.prometheusSpec.additionalScrapeConfigs."""
    s = config.scrape
    return {
        "job_name": s.job_name,
        "scrape_interval": s.interval,
        "scrape_timeout": s.timeout,
        "honor_labels": True,
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [s.namespace]}}],
        "relabel_configs": [
            {
                "source_labels": [f"__meta_kubernetes_pod_label_{_meta_label(s.app_label)}"],
                "regex": s.app_name,
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": s.port_name,
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "Pending|Succeeded|Failed",
                "action": "drop",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_node_name"],
                "target_label": config.labels.node,
            },
        ],
    }


def _operator_relabelings(config: BundleConfig) -> list[dict[str, Any]]:
    return [
        {"action": "labeldrop", "regex": OPERATOR_TARGET_LABELS},
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": config.labels.node},
        {"targetLabel": "job", "replacement": config.scrape.job_name},
    ]


def _metadata(config: BundleConfig) -> dict[str, Any]:
    return {
        "name": config.scrape.app_name,
        "namespace": config.scrape.namespace,
        "labels": {
            config.scrape.app_label: config.scrape.app_name,
            "release": config.scrape.release_label,
        },
    }


def _endpoint(config: BundleConfig) -> dict[str, Any]:
    s = config.scrape
    return {
        "port": s.port_name,
        "path": "/metrics",
        "interval": s.interval,
        "scrapeTimeout": s.timeout,
        "honorLabels": True,
        "relabelings": _operator_relabelings(config),
    }


def service_monitor(config: BundleConfig) -> dict[str, Any]:
    s = config.scrape
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _metadata(config),
        "spec": {
            "selector": {"matchLabels": {s.app_label: s.app_name}},
            "namespaceSelector": {"matchNames": [s.namespace]},
            "endpoints": [_endpoint(config)],
        },
    }


def pod_monitor(config: BundleConfig) -> dict[str, Any]:
    s = config.scrape
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _metadata(config),
        "spec": {
            "selector": {"matchLabels": {s.app_label: s.app_name}},
            "namespaceSelector": {"matchNames": [s.namespace]},
            "podMetricsEndpoints": [_endpoint(config)],
        },
    }


def static_config(config: BundleConfig, targets: Mapping[str, str] | None = None) -> dict[str, Any]:
    """For GPU hosts outside Kubernetes: one target per host, named by a `node` label.

    `targets` maps node names to `host:port`; the default is two example hosts."""
    s = config.scrape
    if targets is None:
        targets = {host: f"{host}:{s.port}" for host in ("gpu-host-1", "gpu-host-2")}
    return {
        "scrape_configs": [
            {
                "job_name": s.job_name,
                "scrape_interval": s.interval,
                "scrape_timeout": s.timeout,
                "honor_labels": True,
                "metrics_path": "/metrics",
                "static_configs": [
                    {"targets": [address], "labels": {config.labels.node: node}}
                    for node, address in targets.items()
                ],
            }
        ]
    }


def scrape_config_files(config: BundleConfig) -> dict[str, str]:
    source = "kube_gpu_exporter/bundle/scrape_configs.py"
    return {
        "scrape-configs/additional-scrape-configs.yaml": dump([kubernetes_job(config)], source),
        "scrape-configs/kube-prometheus-stack-values.yaml": dump(
            {
                "prometheus": {
                    "prometheusSpec": {"additionalScrapeConfigs": [kubernetes_job(config)]}
                }
            },
            source,
        ),
        "scrape-configs/servicemonitor.yaml": dump(service_monitor(config), source),
        "scrape-configs/podmonitor.yaml": dump(pod_monitor(config), source),
        "scrape-configs/static.yaml": dump(static_config(config), source),
    }
