"""Assembles the rule groups into the files users load: a plain Prometheus rules file for
alerts, one for recording rules, and a PrometheusRule custom resource holding both."""

from __future__ import annotations

from typing import Any

from kube_gpu_exporter.bundle.alerts import (
    capacity,
    devices,
    exporter_health,
    gpu_health,
    nvlink_fabric,
    recording,
)
from kube_gpu_exporter.bundle.alerts.rule_types import Group
from kube_gpu_exporter.bundle.config import BundleConfig


def alert_groups(config: BundleConfig) -> list[Group]:
    return [
        exporter_health.group(config),
        devices.group(config),
        nvlink_fabric.group(config),
        gpu_health.group(config),
        capacity.group(config),
    ]


def recording_groups(config: BundleConfig) -> list[Group]:
    return [
        recording.node_groups(config),
        recording.cluster_group(config),
        recording.usage_group(config),
        recording.device_history_group(config),
        recording.energy_group(config),
    ]


def rules_document(groups: list[Group], config: BundleConfig) -> dict[str, Any]:
    return {"groups": [g.to_dict(config) for g in groups]}


def prometheus_rule(config: BundleConfig) -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule, labelled for kube-prometheus-stack's
    default rule selector."""
    groups = recording_groups(config) + alert_groups(config)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "kube-gpu-exporter",
            "namespace": config.scrape.namespace,
            "labels": {
                "app.kubernetes.io/name": "kube-gpu-exporter",
                "release": config.scrape.release_label,
            },
        },
        "spec": rules_document(groups, config),
    }
