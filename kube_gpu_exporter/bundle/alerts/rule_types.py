"""Alert and recording-rule values, and their YAML shape. Annotations are filled in here so every
alert gets the same treatment: a static summary, a templated description and a runbook URL."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kube_gpu_exporter.bundle.config import BundleConfig


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    extra_labels: tuple[tuple[str, str], ...] = ()

    def to_dict(self, config: BundleConfig) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity, **dict(self.extra_labels)},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": config.runbook_url_pattern % self.name.lower(),
            },
        }


@dataclass(frozen=True, slots=True)
class Record:
    record: str
    expr: str
    labels: tuple[tuple[str, str], ...] = ()

    def to_dict(self, config: BundleConfig) -> dict[str, Any]:
        out: dict[str, Any] = {"record": self.record, "expr": self.expr}
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    rules: tuple[Alert | Record, ...] = field(default_factory=tuple)
    # None: Prometheus' global evaluation_interval.
    interval: str | None = None

    def to_dict(self, config: BundleConfig) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.interval:
            out["interval"] = self.interval
        out["rules"] = [r.to_dict(config) for r in self.rules]
        return out
