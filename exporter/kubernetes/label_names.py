"""Kubernetes label keys as Prometheus label names, the kube-state-metrics way:
`app.kubernetes.io/name` becomes `label_app_kubernetes_io_name`."""

from __future__ import annotations

import re

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label_name(key: str) -> str:
    return "label_" + _INVALID.sub("_", key)
